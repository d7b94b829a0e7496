"""What an evaluation costs, part by part, as fastpipe's evaluate() runs it (ResNet-50, one GPU).

After a few training steps at `--batch` (bf16 autocast, channels_last, cuDNN benchmark mode on, as a
run; `--compiled`: the step under torch.compile's default mode), with held-out batches already on the
device (kept, as a run keeps them), each part timed with the device synchronised around it:

- the first evaluation's one-off parts, in a run's order: the folded copy's check (the model's forward,
  the model in fp32, the folded copy's first forward), a screen of `--screen` samples, the whole split of
  `--split` samples (its last, shorter batch a new shape);
- the same again, now warm;
- a warm screen with no check of its outcome against the target, checked after every batch (a read-back
  from the device each), and at twice the batch;
- the per-evaluation refresh of the folded weights;
- the check's two numbers: the folded copy's outputs against the model's, and the model in fp32 against
  the model under autocast (relative L2);
- `--thread-probe`: the folded copy's first call at half the batch in another thread, then in the main
  thread (whether cuDNN's plans built in one thread serve another).

    python3 benchmarks/eval_parts.py --out $OUT [--compiled]

Prints a JSON line per part and a table last.
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

# torch and fastpipe are imported in the functions that use them: --help (the suite's usage check) needs neither


def timed(fn):
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


def batches(samples: int, batch: int, classes: int, device) -> list:
    """Held-out batches as a kept loader holds them: fp32 channels_last images and int labels."""
    import torch

    out, left = [], samples
    while left:
        n = min(batch, left)
        out.append((torch.randn(n, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last),
                    torch.randint(0, classes, (n,), device=device)))
        left -= n
    return out


def train_steps(model, batch: int, classes: int, steps: int, compiled: bool, device) -> None:
    """A run's first steps: the shapes cuDNN autotunes for training."""
    import torch

    step_model = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), device=device)
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(step_model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


class Checked:
    """An ``until`` that reads the sums back after every batch and never ends the pass."""

    def __call__(self, sums, seen):
        return float(sums["accuracy"]) < -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--screen", type=int, default=2048)
    parser.add_argument("--split", type=int, default=10222)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compiled", action="store_true")
    parser.add_argument("--thread-probe", action="store_true",
                        help="first call at half the batch in another thread, then in the main thread")
    args = parser.parse_args()
    import torch
    import torchvision

    from fastpipe.runtime import autotuning_off
    from fastpipe.stages.eval_forward import FLOOR, EvalForwards, difference
    from fastpipe.stages.folding import fold_weights
    from fastpipe.stages.precision import Precision
    from fastpipe.stages.tasks import Classification
    from fastpipe.train.held_out import evaluate
    from fastpipe.train.held_out import HeldOut

    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=args.classes).to(device).to(memory_format=torch.channels_last)
    start = time.perf_counter()
    train_steps(model, args.batch, args.classes, 8, args.compiled, device)
    rows = [{"part": "training steps (8, with the first's autotuning or compilation)",
             "s": time.perf_counter() - start}]
    precision = Precision("amp", torch.bfloat16, "cuda", torch.amp.GradScaler("cuda", enabled=False))
    task = Classification()
    screen = batches(args.screen, args.batch, args.classes, device)
    split = batches(args.split, args.batch, args.classes, device)
    double = batches(args.screen, 2 * args.batch, args.classes, device)
    forwards = EvalForwards("auto", device, torch.bfloat16)
    forwards.prepare(model)
    held = {name: HeldOut(loader, task, precision, device, forwards=forwards)
            for name, loader in (("screen", screen), ("split", split), ("double", double))}

    def part(name, fn, n=1):
        times = [timed(fn)[0] for _ in range(n)]
        row = {"part": name, "s": min(times), "runs": n, "all_s": [round(t, 5) for t in times]}
        rows.append(row)
        print(json.dumps(row), flush=True)

    x, short = screen[0][0], split[-1][0]
    folded = forwards.forwards[id(model)][1]
    model.eval()
    if args.thread_probe:
        # cuDNN's plans for a shape, built in another thread: does the main thread find them?
        half = x[: args.batch // 2]

        def in_thread():
            with torch.no_grad(), precision.autocast():
                part("thread: the folded copy at half the batch", lambda: folded.untuned(half))

        worker = threading.Thread(target=in_thread)
        worker.start()
        worker.join()
        with torch.no_grad(), precision.autocast():
            part("main, after the thread: the folded copy at half the batch", lambda: folded.untuned(half))
    with torch.no_grad(), precision.autocast():
        part("first: the model's forward (benchmark mode on)", lambda: model(x))
        with torch.autocast("cuda", enabled=False), autotuning_off():
            part("first: the model in fp32 (benchmark mode off)", lambda: model(x))
        part("first: the folded copy's refresh", lambda: fold_weights(folded.units))
        folded.checked = True
        part("first: the folded copy's forward", lambda: folded.untuned(x))
        part("first: the folded copy at the split's last batch", lambda: folded.untuned(short))
        part("warm: the folded copy's forward", lambda: folded.untuned(x), args.repeats)
        part("warm: the folded copy at the split's last batch", lambda: folded.untuned(short), args.repeats)
        part("warm: the folded copy's refresh", lambda: fold_weights(folded.units), args.repeats)
        # the check's two numbers (stages/eval_forward.py): the folded copy against the model, and the precision's own
        expected = model(x)
        with torch.autocast("cuda", enabled=False), autotuning_off():
            own = difference(expected, model(x))
        check = {"part": "check (relative L2)", "folded_vs_model": difference(folded.untuned(x), expected),
                 "fp32_vs_autocast": own, "floor": FLOOR}
        print(json.dumps(check), flush=True)
    model.train()
    part("warm: a screen, no check", lambda: evaluate(held["screen"], model), args.repeats)
    part("warm: a screen, checked after every batch", lambda: evaluate(held["screen"], model, until=Checked()),
         args.repeats)
    part("first: a screen at twice the batch, checked", lambda: evaluate(held["double"], model, until=Checked()))
    part("warm: a screen at twice the batch, no check", lambda: evaluate(held["double"], model), args.repeats)
    part("warm: a screen at twice the batch, checked", lambda: evaluate(held["double"], model, until=Checked()),
         args.repeats)
    part("warm: the whole split", lambda: evaluate(held["split"], model), args.repeats)
    (args.out / "eval_parts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [check]))
    print(f"\n{'part':<62} {'s':>9}")
    for r in rows:
        print(f"{r['part']:<62} {r['s']:>9.4f}")
    print(f"check: folded vs model {check['folded_vs_model']:.2e}, fp32 vs autocast {check['fp32_vs_autocast']:.2e}, "
          f"floor {FLOOR}")


if __name__ == "__main__":
    main()
