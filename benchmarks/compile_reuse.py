"""What a halving probe's compilation costs, and which of two ways makes it cheap (issue 27).

Where compilation dominates a probe, halving saves little: every compiled probe pays its cold compile.
Two remedies, measured on the same configuration (each run a fresh process through runner.py):

- cache reuse: a probe's compiled artefacts (Inductor's FX-graph and AOTAutograd caches, the
  ``hydra.sweeper.inductor_cache`` folder or Inductor's per-user default) serve its full run, so the
  finalist's full run starts warm: measured as a cold compiled probe, then the full run from its cache,
  against the same full run from an empty cache;
- eager first: probe with compile=off and compile only the survivors: measured as an eager probe
  against the cold compiled probe (the eager probe costs less; its ranking is eager speed, which need
  not order compiled variants the same way, and it cannot rank compile modes at all).

Writes to --out: compile_reuse.md (the table and, per remedy, the seconds saved on one finalist and on
one pruned combination), compile_reuse.jsonl, compile_reuse.log.

    python benchmarks/compile_reuse.py --out /tmp/cr                       # the CPU: tiny_cnn, compile=default
    python benchmarks/compile_reuse.py --out $OUT/cr --gpu                 # one H200: ResNet-50 bf16 batch 256
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from lib.runner import Deadline, add_common_args, append_jsonl, run_fastpipe, skipped, write_markdown_table

CPU = ["model=tiny_cnn", "dataset.num_images=600", "dataset.image_size=32", "train.batch_size=32",
       "data.num_workers=0", "device=cpu", "launcher.fresh_process=false"]
GPU = ["model=resnet50", "dataset=synthetic", "precision=amp", "train.batch_size=256"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpu", action="store_true", help="ResNet-50 bf16 batch 256 on the GPU instead of the CPU's tiny_cnn")
    p.add_argument("--compile", default="default", choices=["default", "reduce-overhead", "max-autotune"])
    p.add_argument("--probe-steps", type=int, default=30, help="steady-state steps of a probe (halving's default)")
    p.add_argument("--full-steps", type=int, default=200, help="steady-state steps of a full run")
    p.add_argument("--warmup", type=int, default=10, help="measure.warmup_steps (compilation happens in them)")
    add_common_args(p, timeout_s=600)
    return p.parse_args(argv)


def runs(a) -> list:
    """(name, cache folder or None for eager, fresh cache?, steady steps) in the order they run."""
    return [("probe eager", None, False, a.probe_steps), ("probe compiled, cold cache", "probe", True, a.probe_steps),
            ("full run, warm from the probe", "probe", False, a.full_steps),
            ("full run, cold cache", "full", True, a.full_steps)]


def main(argv=None) -> int:
    a = parse_args(argv)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(a.deadline, floor_s=30)
    jsonl = out / "compile_reuse.jsonl"
    jsonl.write_text("")
    base = (GPU if a.gpu else CPU) + ["runtime.progress=false", f"measure.warmup_steps={a.warmup}",
                                      "measure.window=10", "train.epochs=100"]
    rows = {}
    with open(out / "compile_reuse.log", "w") as log:
        for name, cache, fresh, steps in runs(a):
            why = deadline.skip_reason(name)
            if why:
                rows[name] = skipped(why, run=name)
                continue
            env = {}
            if cache is not None:
                folder = out / f"inductor-{cache}"
                if fresh:
                    shutil.rmtree(folder, ignore_errors=True)
                env["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
            compiled = ["compile=off"] if cache is None else [f"compile={a.compile}"]
            run_dir = out / "runs" / f"{len(rows)}-{name.split(',')[0].replace(' ', '-')}"
            res = run_fastpipe(base + compiled + [f"train.max_steps={a.warmup + steps}"], run_dir,
                               deadline.timeout(a.timeout), log, env=env)
            deadline.record(name, res.get("wall_s"))
            rows[name] = {"run": name, "status": res.get("status"), "reason": res.get("reason"),
                          "wall_s": res.get("wall_s"), "warmup_s": res.get("warmup_s"),
                          "throughput": res.get("throughput"), "compile_cache": res.get("compile_cache")}
            append_jsonl(jsonl, rows[name])
    wall = {k: r.get("wall_s") for k, r in rows.items()}
    notes = []
    eager, cold = wall.get("probe eager"), wall.get("probe compiled, cold cache")
    warm, full = wall.get("full run, warm from the probe"), wall.get("full run, cold cache")
    if warm and full:
        notes.append(f"cache reuse: a finalist's full run takes {full - warm:.1f} s less wall time warm from its "
                     f"probe's cache ({warm:.1f} s against {full:.1f} s cold); a pruned combination saves nothing")
    if eager and cold:
        notes.append(f"eager first: a probe costs {cold - eager:.1f} s less eager ({eager:.1f} s against {cold:.1f} s "
                     "compiled); a finalist still compiles cold in its full run (or in a compiled round after)")
    title = (f"{'ResNet-50 bf16 batch 256' if a.gpu else 'tiny_cnn on the CPU, batch 32'}, compile={a.compile}, "
             f"probes {a.warmup}+{a.probe_steps} steps, full runs {a.warmup}+{a.full_steps}")
    columns = [("run", "run"), ("wall s", "wall_s", ".1f"), ("warm-up s", "warmup_s", ".1f"),
               ("samples/s", "throughput", ",.1f"),
               ("cache", lambda r: (r.get("compile_cache") or {}).get("state") if isinstance(r.get("compile_cache"), dict)
                else None), ("status", lambda r: "ok" if r.get("status") == "ok" else f"{r.get('status')}: {r.get('reason')}")]
    print(write_markdown_table(out / "compile_reuse.md", list(rows.values()), columns, title, notes))
    return 0 if all(r.get("status") == "ok" for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
