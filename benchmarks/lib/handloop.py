"""The reference: a hand-written training loop (nanoGPT style) on synthetic GPU-resident data.

Same model, batch, precision, channels_last, compile mode, optimizer and data as fastpipe's
`dataset=synthetic` runs, timed the same way (warm-up excluded, synchronise at the edges).
Prints one JSON line: {"throughput": samples/s, ...}.

    python benchmarks/lib/handloop.py --model resnet50 --batch 256 --compile default --steps 150
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--compile", default="off", choices=["off", "default", "reduce-overhead", "max-autotune"])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    cl = device.type == "cuda"
    fmt = torch.channels_last if cl else torch.contiguous_format
    model = getattr(torchvision.models, args.model)(num_classes=args.classes).to(device, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, fused=True)
    if args.compile != "off":
        model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
    batches = [(torch.randn(args.batch, 3, args.image_size, args.image_size, device=device).contiguous(memory_format=fmt),
                torch.randint(0, args.classes, (args.batch,), device=device)) for _ in range(4)]
    dtype = torch.bfloat16 if args.dtype == "bf16" else None

    def step(i: int) -> torch.Tensor:
        x, y = batches[i % 4]
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(i)
    sync()
    warmup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    sync()
    seconds = time.perf_counter() - t0
    print(json.dumps({"runner": "hand", "model": args.model, "compile": args.compile, "dtype": args.dtype,
                      "batch": args.batch, "throughput": args.batch * args.steps / seconds, "warmup_s": warmup_s,
                      "steps": args.steps, "final_loss": loss.item(), "torch": torch.__version__,
                      "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}))


if __name__ == "__main__":
    main()
