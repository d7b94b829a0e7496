"""How fast a held-out forward can be: ResNet-50's evaluation forward, as fastpipe runs it and rewritten.

One H200, GPU-resident synthetic batches (224 px, channels_last), the model in eval mode with BatchNorm
statistics from a few training-mode forwards, no gradients; each variant's images/s over `--steps`
forwards after `--warmup`, at each batch in `--batches`, with its top-1 agreement against the first:

- eager: bf16 autocast around the model, as fastpipe's evaluate() runs it;
- eager-bf16: a bf16 copy of the model, no autocast;
- folded: BatchNorm folded into the convolution before it (torch.fx), autocast;
- fused: folded, and conv+bias+ReLU / conv+bias+add+ReLU as one cuDNN call each (torch.cudnn_convolution_relu,
  torch.cudnn_convolution_add_relu), bf16 weights; fused-heuristic: the same with cuDNN's benchmark mode off
  (its heuristics pick each call's engine: its first call autotunes nothing);
- cudagraph: the eager forward replayed from a CUDA graph;
- h2d: eager, its uint8 batch copied from pinned memory and normalised each time (a loader's last hop);
- compiled (and, named in --variants, compiled-max-autotune-no-cudagraphs): torch.compile of the eval-mode
  model (its first call, compilation with an empty cache, is printed beside it).

Prints a JSON line per variant and batch, then a table.

    python3 benchmarks/eval_forward.py --out $OUT
"""
from __future__ import annotations

import argparse
import copy
import json
import operator
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

FMT = torch.channels_last


def folded_weights(conv: nn.Conv2d, bn: nn.BatchNorm2d):
    """The convolution's weight and bias with the BatchNorm after it (eval mode) folded in."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    weight = conv.weight * scale.reshape(-1, 1, 1, 1)
    bias = bn.bias - bn.running_mean * scale
    if conv.bias is not None:
        bias = bias + conv.bias * scale
    return weight, bias


class Fused(nn.Module):
    """conv -> bn [-> + z] [-> relu] as one call, weights folded once (refresh)."""

    def __init__(self, conv, bn, relu: bool, add: bool, cudnn: bool, dtype):
        super().__init__()
        self.conv, self.bn, self.relu, self.add, self.cudnn, self.dtype = conv, bn, relu, add, cudnn, dtype
        self.refresh()

    @torch.no_grad()
    def refresh(self):
        w, b = folded_weights(self.conv, self.bn)
        self.w = w.to(self.dtype).contiguous(memory_format=FMT)
        self.b = b.to(self.dtype)

    def forward(self, x, z=None):
        c = self.conv
        if self.cudnn and self.relu:
            if self.add:
                return torch.cudnn_convolution_add_relu(x, self.w, z, 1.0, self.b, c.stride, c.padding,
                                                        c.dilation, c.groups)
            return torch.cudnn_convolution_relu(x, self.w, self.b, c.stride, c.padding, c.dilation, c.groups)
        y = F.conv2d(x, self.w, self.b, c.stride, c.padding, c.dilation, c.groups)
        if self.add:
            y = y + z
        return F.relu(y) if self.relu else y


def is_relu(node, modules):
    return ((node.op == "call_module" and isinstance(modules.get(node.target), nn.ReLU))
            or (node.op == "call_function" and node.target in (F.relu, torch.relu)))


def fuse(model: nn.Module, cudnn: bool, dtype) -> nn.Module:
    """An FX copy of ``model`` whose conv->bn(->add)(->relu) chains are single Fused modules."""
    gm = torch.fx.symbolic_trace(model)
    modules = dict(gm.named_modules())
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not isinstance(modules.get(node.target), nn.BatchNorm2d):
            continue
        conv_node = node.args[0]
        if not (isinstance(conv_node, torch.fx.Node) and conv_node.op == "call_module"
                and isinstance(modules.get(conv_node.target), nn.Conv2d) and len(conv_node.users) == 1):
            continue
        end, add, relu, z = node, False, False, None
        users = list(end.users)
        if len(users) == 1 and users[0].op == "call_function" and users[0].target in (operator.add, operator.iadd, torch.add):
            other = [a for a in users[0].args if a is not end]
            if len(other) == 1 and isinstance(other[0], torch.fx.Node):
                nxt = list(users[0].users)
                if len(nxt) == 1 and is_relu(nxt[0], modules):
                    add, z, end = True, other[0], nxt[0]
        if not add and len(users) == 1 and is_relu(users[0], modules):
            relu, end = True, users[0]
        relu = relu or add
        name = f"fused_{count}"
        count += 1
        gm.add_submodule(name, Fused(modules[conv_node.target], modules[node.target], relu, add, cudnn, dtype))
        with gm.graph.inserting_after(end):
            new = gm.graph.call_module(name, (conv_node.args[0],) + ((z,) if add else ()))
        end.replace_all_uses_with(new)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return gm


def timed(fn, xs, warmup, steps):
    for i in range(warmup):
        fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        out = fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--batches", default="256,512")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=24)
    # compiled-max-autotune-no-cudagraphs is a variant too: its first call takes minutes (273 s at batch 256)
    p.add_argument("--variants", default="eager,eager-bf16,folded,fused,cudagraph,h2d,compiled")
    p.add_argument("--deadline", type=float, default=480)
    args = p.parse_args()
    start = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = torchvision.models.resnet50(num_classes=10).to(dev, memory_format=FMT)
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):  # BatchNorm statistics that are not 0/1
        for _ in range(3):
            model(torch.randn(64, 3, 224, 224, device=dev).contiguous(memory_format=FMT))
    model.eval()
    rows, log = [], open(args.out / "eval_forward.jsonl", "w")
    for batch in [int(b) for b in args.batches.split(",")]:
        xs = [torch.randn(batch, 3, 224, 224, device=dev).contiguous(memory_format=FMT) for _ in range(2)]
        pinned = [torch.randint(0, 255, (batch, 224, 224, 3), dtype=torch.uint8).pin_memory() for _ in range(2)]
        reference = None
        for variant in args.variants.split(","):
            if time.time() - start > args.deadline:
                print(json.dumps({"variant": variant, "batch": batch, "skipped": "deadline"}), flush=True)
                continue
            build_s, fn, inputs = 0.0, None, xs
            try:
                t0 = time.perf_counter()
                fn, inputs = make(variant, model, xs, pinned, dev)
                with torch.no_grad():
                    fn(inputs[0])
                torch.cuda.synchronize()
                build_s = time.perf_counter() - t0
                with torch.no_grad():
                    seconds, _ = timed(fn, inputs, args.warmup, args.steps)
                    agree = None
                    if variant != "h2d":
                        top = fn(inputs[0]).float().argmax(1)
                        reference = top if reference is None else reference
                        agree = (top == reference).float().mean().item()
                row = {"variant": variant, "batch": batch, "img_s": round(batch * args.steps / seconds),
                       "ms_per_batch": round(1000 * seconds / args.steps, 2), "first_call_s": round(build_s, 1),
                       "top1_agreement": agree}
            except Exception as exc:  # a variant that does not run here is a row that says why
                row = {"variant": variant, "batch": batch, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(json.dumps(row), flush=True)
            log.write(json.dumps(row) + "\n")
            log.flush()
            rows.append(row)
            torch._dynamo.reset()
    print("\n| variant | batch | img/s | ms a batch | first call s | top-1 agreement |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['variant']} | {r['batch']} | {r.get('img_s', r.get('error', ''))} | {r.get('ms_per_batch', '')} | "
              f"{r.get('first_call_s', '')} | {r.get('top1_agreement', '')} |")
    print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                      "device": torch.cuda.get_device_name()}))


def make(variant, model, xs, pinned, dev):
    """(the forward to time, its inputs) for ``variant``."""
    amp = lambda f: (lambda x: _amp(f, x))  # noqa: E731
    if variant == "eager":
        return amp(model), xs
    if variant == "eager-bf16":
        m = copy.deepcopy(model).to(torch.bfloat16)
        return m, [x.to(torch.bfloat16) for x in xs]
    if variant == "folded":
        return amp(fuse(model, cudnn=False, dtype=torch.float32)), xs
    if variant in ("fused", "fused-heuristic"):
        m = fuse(model, cudnn=True, dtype=torch.bfloat16)
        if variant == "fused":
            return (lambda x: _amp(m, x)), [x.to(torch.bfloat16) for x in xs]

        def heuristic(x):  # cuDNN's heuristics choose each fused call's engine: nothing autotuned
            torch.backends.cudnn.benchmark = False
            try:
                return _amp(m, x)
            finally:
                torch.backends.cudnn.benchmark = True
        return heuristic, [x.to(torch.bfloat16) for x in xs]
    if variant == "cudagraph":
        static = xs[0].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                _amp(model, static)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            out = _amp(model, static)

        def replay(x):
            static.copy_(x)
            graph.replay()
            return out
        return replay, xs
    if variant == "h2d":
        mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
        std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255

        def loaded(u8):
            x = u8.to(dev, non_blocking=True).permute(0, 3, 1, 2).float().sub_(mean).div_(std)
            return _amp(model, x.contiguous(memory_format=FMT))
        return loaded, pinned
    if variant.startswith("compiled"):
        mode = variant[len("compiled-"):] or None
        return amp(torch.compile(model, mode=mode)), xs
    raise ValueError(variant)


def _amp(m, x):
    with torch.autocast("cuda", torch.bfloat16):
        return m(x)


if __name__ == "__main__":
    main()
