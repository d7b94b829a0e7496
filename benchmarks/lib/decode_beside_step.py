"""JPEG decoding beside a training step: data=mmap's loader variants under one compiled ResNet-50 step.

One process builds the step once (ResNet-50, bf16 autocast, channels_last, torch.compile default,
SGD), then trains it from each variant's loader in turn, in the order given (repeat a name to
alternate: the repeats give each variant's spread). A variant is a pack (``raw`` or ``jpeg``) and
``+``-joined options: Hydra overrides of the loader (``+data.decoder=cpu+data.decode_workers=8``);
``+pinned``: each batch's JPEG files gathered into pinned memory instead of pageable memory (the
in-process decoders only);
``+switch``: a 0.2 ms GIL switch interval; ``+burn=N``: N busy-looping processes meanwhile (CPU load
without decoding), ``+burnaff`` binds them to the CPUs data.decode_affinity leaves to decode workers;
``+shadow=KIND``: a thread doing one JPEG batch's KIND of work per step beside it (decode_shadow.py);
``+sidestream``: the step and the loader's hand-over on a stream of their own instead of the default one,
``+histream`` on one of high priority (its kernels' blocks go to the GPU first);
``alone:VARIANT``: the loader's batches taken with no step. Per variant, a JSON line in
OUT/decode_beside_step.jsonl and a table row: img/s over the measured steps (synchronised at both
edges), data-wait (the loop's time in ``next(loader)``), and the mean wall time and count of the
decode calls made in this process (in-process decoders), so a slower step can be told from a slower
decode. ``--eager`` leaves out torch.compile (a CPU check of the script).

    python benchmarks/lib/decode_beside_step.py --raw R.fppack --jpeg J.fppack --out OUT \
        --variants raw,jpeg,jpeg+pinned,raw,jpeg,jpeg+pinned -- dataset=shapes ...
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_shadow import Shadow  # noqa: E402


def pinned_gather(reader, local):
    """The files of images ``local`` copied into one pinned buffer; one view per file."""
    import torch

    starts, ends = reader.offsets[local], reader.offsets[local + 1]
    sizes = (ends - starts).tolist()
    whole = torch.empty(sum(sizes), dtype=torch.uint8, pin_memory=torch.cuda.is_available())
    buf, pos = whole.numpy(), 0
    for s, e in zip(starts, ends):
        buf[pos:pos + e - s] = reader._map[s:e]
        pos += e - s
    return list(torch.split(whole, sizes))


SWITCH_S = 0.0002  # +switch: the interpreter's GIL switch interval (default 5 ms)


def burners(variant: str) -> list:
    """The busy processes ``+burn=N`` asks for (bound to the decode workers' CPUs with ``+burnaff``)."""
    count = next((int(o.split("=", 1)[1]) for o in variant.split("+") if o.startswith("burn=")), 0)
    if not count:
        return []
    from fastpipe.config.data import TRAINING_CORES
    from fastpipe.machine import cpus_beyond

    cpus = cpus_beyond(TRAINING_CORES) if "+burnaff" in variant else None
    code = (f"import os; os.sched_setaffinity(0, {cpus!r}); " if cpus else "") + "\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


class Timed:
    """Wraps a callable; keeps each call's wall seconds (thread-safe)."""

    def __init__(self, fn) -> None:
        self.fn, self.seconds, self.lock = fn, [], threading.Lock()

    def __call__(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            with self.lock:
                self.seconds.append(time.perf_counter() - t)

    def take(self) -> list:
        with self.lock:
            out, self.seconds = self.seconds, []
        return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--raw", type=Path, required=True)
    p.add_argument("--jpeg", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--variants", default="raw,jpeg,jpeg+pinned")
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--eager", action="store_true", help="no torch.compile (a CPU check of the script)")
    p.add_argument("--tag", default="", help="a word for this process's rows (e.g. its environment)")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)

    import torch
    import torch.nn.functional as F
    import torchvision
    from hydra import compose, initialize_config_dir

    import fastpipe.data.pack.jpeg as jpeg_mod
    import fastpipe.data.pack.source as source_mod
    from fastpipe.config import register_configs, to_settings
    from fastpipe.data import build_loader
    from fastpipe.data.splits import build_dataset
    from fastpipe.runtime import Dist, Runtime, cache_root, cpu_cores

    register_configs()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    plain_gather = source_mod.gather
    decode_timer = Timed(jpeg_mod.Decoder.__call__)
    jpeg_mod.Decoder.__call__ = lambda self, files: decode_timer(self, files)

    def loader_for(variant: str):
        pack, *opts = variant.split("+")
        source_mod.gather = pinned_gather if "pinned" in opts else plain_gather
        extra = [o for o in opts if "=" in o and not o.startswith(("burn=", "shadow="))]  # e.g. data.num_threads=2
        overrides = ["data=mmap", f"data.path={a.raw if pack == 'raw' else a.jpeg}", "data.verify=false",
                     *a.overrides, *extra]
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        s = to_settings(cfg, {"data": "mmap"}, check=False)
        runtime = Runtime(device, Dist(), cache_root(), cpu_cores())
        splits = build_dataset(s.dataset, runtime, "dataset")
        return build_loader(s.data, splits, runtime, s.train.batch_size, s.seed, True, device.type == "cuda"), splits

    first, splits = loader_for("raw")
    model = torchvision.models.resnet50(num_classes=len(splits.train.classes), zero_init_residual=True)
    model = model.to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    compiled = model if a.eager else torch.compile(model)

    def step(x, y):
        with torch.autocast(device.type, torch.bfloat16):
            loss = F.cross_entropy(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def batches(loader):
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            yield from loader
            epoch += 1

    rows = []
    for i, name in enumerate(a.variants.split(",")):
        alone = name.startswith("alone:")  # the loader alone: batches taken, no step
        variant = name.removeprefix("alone:")
        loader = first if i == 0 else loader_for(variant)[0]
        shadow_kind = next((o.split("=", 1)[1] for o in variant.split("+") if o.startswith("shadow=")), None)
        shadow = Shadow(shadow_kind, a.jpeg, loader.loader.batch_size, device) if shadow_kind else None
        side = None
        if device.type == "cuda" and ("+sidestream" in variant or "+histream" in variant):
            side = torch.cuda.Stream(priority=-1 if "+histream" in variant else 0)
        scope = torch.cuda.stream(side) if side is not None else contextlib.nullcontext()
        scope.__enter__()  # before the loader's first batch: its hand-over waits on the stream current then
        it = batches(loader)
        busy = burners(variant)
        try:
            work = (lambda x, y: None) if alone else step

            def run(x, y):
                work(x, y)
                if shadow is not None:
                    shadow.tick()

            sys.setswitchinterval(SWITCH_S if "+switch" in variant else 0.005)  # +switch: the GIL handed over sooner
            for _ in range(a.warmup):
                run(*next(it))
            decode_timer.take()
            torch.cuda.synchronize() if device.type == "cuda" else None
            t0, wait, n = time.perf_counter(), 0.0, 0
            for _ in range(a.steps):
                w = time.perf_counter()
                x, y = next(it)
                wait += time.perf_counter() - w
                run(x, y)
                n += len(x)
            torch.cuda.synchronize() if device.type == "cuda" else None
            seconds = time.perf_counter() - t0
            decodes = decode_timer.take()
        finally:  # a variant that fails leaves no busy process behind
            scope.__exit__(None, None, None)
            if shadow is not None:
                shadow.close()
            for proc in busy:
                proc.kill()
                proc.wait()
        row = {"variant": name, "tag": a.tag, "img_per_s": n / seconds, "data_wait_frac": wait / seconds,
               "step_ms": 1000 * seconds / a.steps, "decode_calls": len(decodes),
               "decode_ms_mean": 1000 * statistics.fmean(decodes) if decodes else None,
               "decode_ms_median": 1000 * statistics.median(decodes) if decodes else None,
               "loader": loader.describe(),
               "shadow_batches": shadow.done if shadow else None, "shadow_errors": shadow.errors if shadow else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(a.out / "decode_beside_step.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        del it
    print("variant | tag | img/s | data-wait % | step ms | decode ms (mean) | decodes | shadow batches")
    for r in rows:
        dm = f"{r['decode_ms_mean']:.1f}" if r["decode_ms_mean"] else "-"
        sh = "-" if r["shadow_batches"] is None else f"{r['shadow_batches']}" + (" (failed)" if r["shadow_errors"] else "")
        print(f"{r['variant']} | {r['tag']} | {r['img_per_s']:,.0f} | {100 * r['data_wait_frac']:.1f} | "
              f"{r['step_ms']:.1f} | {dm} | {r['decode_calls']} | {sh}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
