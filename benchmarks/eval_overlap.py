"""Whether an evaluation overlapped with training pays on the GPU (issue 36's optional `train.eval_overlap`).

ResNet-50 trains `--steps` steps at `--batch` (bf16 autocast, channels_last, SGD, synthetic batches
already on the device, so the loader takes no part; `--compiled`: the step under torch.compile's
default mode), evaluating a screen of `--screen` held-out samples (kept on the device, as a run keeps
them, through the folded copy a run evaluates) every `--every` steps:

- `none`: no evaluation (the training clock alone);
- `serial`: each evaluation between two steps, its sums read back before the next step (as a run does);
- `overlap`: each evaluation on a second CUDA stream, of a copy of the weights taken at its step, while
  the next steps run; its sums read back at the next evaluation (`overlap-high`: that stream at
  CUDA's higher priority).

Each mode runs `--repeats` times, interleaved; an evaluation's cost is the mode's wall less `none`'s
(medians). Overlap pays what it saves against `serial`.

    python3 benchmarks/eval_overlap.py --out $OUT [--compiled]

Prints a JSON line per run and a table last.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

# torch and fastpipe are imported in the functions that use them: --help (the suite's usage check) needs neither


class Trainer:
    """The training steps and the screen's evaluations of one measurement."""

    def __init__(self, args, device) -> None:
        import torch
        import torchvision

        from fastpipe.stages.eval_forward import EvalForwards

        torch.backends.cudnn.benchmark = True
        torch.manual_seed(0)
        self.args, self.device = args, device
        self.model = torchvision.models.resnet50(num_classes=args.classes).to(device).to(
            memory_format=torch.channels_last)
        self.step_model = torch.compile(self.model) if args.compiled else self.model
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(args.batch, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
        self.y = torch.randint(0, args.classes, (args.batch,), device=device)
        self.screen = [(torch.randn(args.batch, 3, 224, 224, device=device).contiguous(
            memory_format=torch.channels_last), torch.randint(0, args.classes, (args.batch,), device=device))
            for _ in range(args.screen // args.batch)]
        # the evaluated copy: the training weights are copied into it at each evaluation's step, so an
        # overlapped evaluation reads that step's weights while the next steps update the model's
        self.evaluated = copy.deepcopy(self.model).eval()
        self.forwards = EvalForwards("auto", device, torch.bfloat16)
        self.forwards.prepare(self.evaluated)
        self.side = {"overlap": torch.cuda.Stream(device), "overlap-high": torch.cuda.Stream(device, priority=-1)}

    def step(self) -> None:
        import torch
        import torch.nn.functional as F

        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(self.step_model(self.x), self.y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def snapshot(self):
        """This step's weights in the evaluated copy, folded: what its evaluation runs."""
        import torch

        with torch.no_grad():
            for mine, theirs in zip(self.evaluated.state_dict().values(), self.model.state_dict().values()):
                mine.copy_(theirs)
        return self.forwards(self.evaluated)

    def screen_sums(self, forward):
        """The screen's correct predictions, summed on the device (no read-back)."""
        import torch

        total = torch.zeros((), dtype=torch.float64, device=self.device)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for inputs, targets in self.screen:
                total += (forward(inputs).argmax(1) == targets).sum()
        return total

    def run(self, mode: str) -> dict:
        import torch

        args, pending, evaluations, screens, after = self.args, None, 0, [], []
        torch.cuda.synchronize()
        start = time.perf_counter()
        for step in range(1, args.steps + 1):
            self.step()
            if screens and len(after) < len(screens):  # serial: the step after an evaluation, on its own
                torch.cuda.synchronize()
                after.append(time.perf_counter() - ended)
            if mode == "none" or step % args.every:
                continue
            evaluations += 1
            if mode == "serial":  # each evaluation and the step after it timed apart (a sync before each)
                torch.cuda.synchronize()
                began = time.perf_counter()
                self.screen_sums(self.snapshot()).item()
                ended = time.perf_counter()
                screens.append(ended - began)
                continue
            if pending is not None:  # the last evaluation's result, as an overlapped run reads it
                pending.item()
            side = self.side[mode]
            forward = self.snapshot()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                pending = self.screen_sums(forward)  # the next steps never wait for it
        if pending is not None:
            pending.item()
        torch.cuda.synchronize()
        timed = {"screen_s": statistics.median(screens), "step_after_s": statistics.median(after)} if after else {}
        return {"mode": mode, "s": time.perf_counter() - start, "evaluations": evaluations, **timed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--screen", type=int, default=2048)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compiled", action="store_true")
    args = parser.parse_args()
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(args, torch.device("cuda"))
    for mode in ("serial", "overlap", "overlap-high"):  # warm: compilation, autotuning, the fold's check
        args_steps, args.steps = args.steps, args.every * 2
        trainer.run(mode)
        args.steps = args_steps
    modes = ("none", "serial", "overlap", "overlap-high")
    rows = []
    for repeat in range(args.repeats):
        for mode in modes:
            row = {**trainer.run(mode), "repeat": repeat, "batch": args.batch, "compiled": args.compiled}
            rows.append(row)
            print(json.dumps(row), flush=True)
    name = f"eval_overlap_b{args.batch}{'_compiled' if args.compiled else ''}"
    (args.out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    median = {m: statistics.median(r["s"] for r in rows if r["mode"] == m) for m in modes}
    evaluations = rows[1]["evaluations"]
    print(f"\n{name}: {args.steps} steps, {evaluations} screens of {args.screen} samples, {args.repeats} runs a mode")
    print(f"{'mode':<14} {'wall (s, median)':>17} {'all runs (s)':>28} {'eval cost (s)':>14} {'per screen (ms)':>16}")
    for m in modes:
        cost = median[m] - median["none"]
        runs = ", ".join(f"{r['s']:.3f}" for r in rows if r["mode"] == m)
        print(f"{m:<14} {median[m]:>17.3f} {runs:>28} {cost:>14.3f} {1000 * cost / evaluations:>16.1f}")
    serial = [r for r in rows if r["mode"] == "serial"]
    screens = ", ".join(f"{1000 * r['screen_s']:.1f}" for r in serial)
    after = ", ".join(f"{1000 * r['step_after_s']:.1f}" for r in serial)
    print(f"serial, timed apart (each run's median): a screen {screens} ms; the step after it {after} ms; "
          f"a step in `none` {1000 * median['none'] / args.steps:.1f} ms (its mean)")


if __name__ == "__main__":
    main()
