"""What checkpointing costs the training loop: train.checkpoint_every=N vs no checkpoints, same steps.

ResNet-50 on device-resident synthetic data (bf16 autocast, channels_last, compile off, batch 256,
fused SGD), 300 steps, one run with a checkpoint every 50 steps and one without, alternating order
over --repeats, each a fresh process through runner.py. Reports the throughput ratio, the stall per
checkpoint that the throughput and epoch-time differences imply, and, when metrics.json has it,
fastpipe's own `checkpoint_stall_s` (the training thread's stall per checkpoint: median, max).

fastpipe's measurement windows close at a synchronised step edge and the next opens at the next
batch, so a checkpoint written on a window edge would fall between windows and cost no measured
time. The warm-up (15) is chosen so that every checkpoint step lies inside a window; the script
refuses a combination where one would not.

Then, unless --no-dcp (and only if the --deadline leaves time), the writers alone, in this process
and on the same device as the runs (cuda; cpu under --smoke): the same model (tiny_cnn under --smoke)
with SGD(momentum=0.9), a couple of training steps so the momentum buffers exist, then
--writer-checkpoints checkpoints (5; 2 under --smoke) of the model and optimizer state with each of
  fastpipe   fastpipe.checkpoint.background.BackgroundWriter, called as fastpipe.checkpoint.policy.Checkpointer
             does: the finite-weights check (its one synchronisation), the RNG states, ``submit``;
  dcp        torch.distributed.checkpoint.async_save(checkpoint_id=<folder>/dcp-<i>), its defaults.
Each is timed from a synchronised device: the stall is until the call returns control to the
training thread, durable until the write is complete (``wait()`` / ``future.result()``; both fsync).
async_save needs no process group in torch 2.14 (it saves as a single process); should it raise
without one, it is measured again inside a 1-rank gloo group (FileStore), and the row says so. A
writer that raises is a failed row with the exception's first line; the script goes on. The
checkpoints go to --out/checkpoints, deleted once measured.

Writes to --out as each run ends: checkpoint_stall.jsonl, checkpoint_stall.md (the runs' table, then
the writers' one), checkpoint_stall.log.

    python benchmarks/checkpoint_stall.py --out /tmp/ckpt                 # on a GPU
    python benchmarks/checkpoint_stall.py --out /tmp/ckpt --smoke         # CPU, tiny_cnn, for the tests
    python benchmarks/checkpoint_stall.py --out /tmp/ckpt --no-dcp        # the runs only
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from lib.runner import (Deadline, add_common_args, append_jsonl, median, run_fastpipe, skipped, status_text, summarize,
                    write_markdown_table)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps of each run (warm-up included)")
    p.add_argument("--every", type=int, default=50, help="train.checkpoint_every of the checkpointing run")
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="CPU, tiny_cnn at 32 px, fp32, a few steps")
    p.add_argument("--no-dcp", action="store_true", help="skip the in-process comparison of fastpipe's writer "
                   "with torch.distributed.checkpoint.async_save")
    p.add_argument("--writer-checkpoints", type=int, default=5, help="checkpoints per writer in that comparison")
    add_common_args(p, timeout_s=600)
    a = p.parse_args(argv)
    if a.smoke:
        a.model, a.batch, a.steps, a.every, a.warmup, a.window = "tiny_cnn", 16, 16, 6, 3, 4
        a.writer_checkpoints = min(a.writer_checkpoints, 2)
    on_edge = [s for s in range(a.every, a.steps, a.every) if s > a.warmup and (s - a.warmup) % a.window == 0]
    if on_edge:
        p.error(f"checkpoint step(s) {on_edge} fall on a window edge (warm-up {a.warmup}, window {a.window}): "
                "their cost would not be measured; change --warmup or --window")
    return a


def overrides(a, every: int) -> list:
    base = [f"model={a.model}", "dataset=synthetic", "optimizer=sgd", f"train.batch_size={a.batch}",
            f"dataset.num_images={a.batch * a.steps}", "train.epochs=1", f"train.max_steps={a.steps}",
            f"measure.warmup_steps={a.warmup}", f"measure.window={a.window}", "runtime.progress=false",
            f"train.checkpoint_every={every}"]
    if a.smoke:
        return base + ["device=cpu", "dataset.image_size=32", "dataset.num_classes=10", "precision=fp32",
                       "compile=off", "launcher.fresh_process=false"]
    return base + ["device=cuda", "dataset.image_size=224", "dataset.num_classes=1000", "precision=amp",
                   "precision.dtype=bf16", "runtime.channels_last=true", "compile=off"]


def stall_stats(value):
    """fastpipe's checkpoint_stall_s -> (median, max, the write's median), whatever its shape: a dict
    {median, max, count, write_median} (fastpipe's), a per-checkpoint list, or one number."""
    if value is None:
        return None, None, None
    if isinstance(value, dict):
        return value.get("median"), value.get("max"), value.get("write_median")
    if isinstance(value, (list, tuple)):
        return median(value), max(value) if value else None, None
    return value, value, None


def row_of(name: str, every: int, r: int, res: dict, a) -> dict:
    med, worst, write = stall_stats(res.get("checkpoint_stall_s"))
    measured = res.get("measured_steps")
    return {"run": name, "checkpoint_every": every, "repeat": r, "throughput": res.get("throughput"),
            "measured_s": measured * a.batch / res["throughput"] if measured and res.get("throughput") else None,
            "epoch_s": res.get("epoch_time_s"), "stall_median_s": med, "stall_max_s": worst, "write_median_s": write,
            "checkpoint_stall_s": res.get("checkpoint_stall_s"), "status": res.get("status", "failed"),
            "reason": res.get("reason"), "wall_s": res.get("wall_s"),
            "device": (res.get("env") or {}).get("device_name"), "torch": (res.get("env") or {}).get("torch")}


def write_table(a, rows: list) -> str:
    checkpoints = len([s for s in range(a.every, a.steps + 1, a.every) if s > a.warmup])  # inside measured windows
    summary = {}
    for name in ("none", f"every {a.every}"):
        mine = [r for r in rows if r["run"] == name]
        if mine:
            summary[name] = dict(summarize(mine, ("throughput", "measured_s", "epoch_s", "stall_median_s",
                                                  "write_median_s"), "throughput"), run=name,
                                 stall_max_s=max((r["stall_max_s"] or 0 for r in mine), default=None) or None)
    none, ckpt = summary.get("none", {}), summary.get(f"every {a.every}", {})
    if none.get("throughput") and ckpt.get("throughput"):
        ckpt["ratio"] = f"{ckpt['throughput'] / none['throughput']:.3f}x"
        ckpt["per_ckpt_window_s"] = (ckpt["measured_s"] - none["measured_s"]) / checkpoints
        if ckpt["epoch_s"] and none["epoch_s"]:
            ckpt["per_ckpt_epoch_s"] = (ckpt["epoch_s"] - none["epoch_s"]) / checkpoints
    device = next((r["device"] for r in rows if r.get("device")), "?")
    torch_version = next((r["torch"] for r in rows if r.get("torch")), "?")
    title = (f"{a.model}, batch {a.batch}, synthetic device-resident data, "
             f"{'fp32 (smoke)' if a.smoke else 'bf16 autocast, channels_last'}, compile off, fused SGD; {a.steps} steps "
             f"({a.warmup} warm-up, windows of {a.window}); {checkpoints} checkpoints inside the measured windows; "
             f"median of {a.repeats}; device {device}, torch {torch_version}")
    columns = [("run", "run"), ("img/s", "throughput", ",.0f"), ("all runs", "runs"), ("vs none", "ratio"),
               ("measured s", "measured_s", ".2f"), ("epoch s", "epoch_s", ".2f"),
               ("stall per checkpoint s (measured windows)", "per_ckpt_window_s", ".3f"),
               ("stall per checkpoint s (epoch time)", "per_ckpt_epoch_s", ".3f"),
               ("checkpoint_stall_s median", "stall_median_s", ".3f"), ("checkpoint_stall_s max", "stall_max_s", ".3f"),
               ("write s (median)", "write_median_s", ".3f"), ("status", "status")]
    notes = [] if any(r.get("checkpoint_stall_s") is not None for r in rows) else [
        "checkpoint_stall_s: not in this fastpipe's metrics.json (the columns from the differences still apply)"]
    return write_markdown_table(None, list(summary.values()), columns, title, notes)


WRITERS = ("fastpipe", "dcp")
WRITER_NAMES = {"fastpipe": "fastpipe BackgroundWriter", "dcp": "dcp async_save"}


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def build_model(a, device):
    """The runs' model (tiny_cnn under --smoke), with SGD(momentum=0.9) after two training steps."""
    import torch

    size, classes = (32, 10) if a.smoke else (224, 1000)
    if a.model == "tiny_cnn":
        from fastpipe.models import TinyCNN

        model = TinyCNN(num_classes=classes)
    else:
        import torchvision

        model = getattr(torchvision.models, a.model)(num_classes=classes)
    model = model.to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)  # as the runs hold it
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(2):  # the momentum buffers exist after the first step
        x = torch.randn(4 if a.smoke else 32, 3, size, size, device=device)
        if device.type == "cuda":
            x = x.to(memory_format=torch.channels_last)
        y = torch.randint(0, classes, (x.shape[0],), device=device)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def files_of(paths) -> tuple:
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return len(files), sum(f.stat().st_size for f in files)


def time_checkpoints(save, device, count: int, deadline: Deadline, after=None) -> dict:
    """``save(i)`` returns ``wait`` each time: the stall is until it returns, durable until ``wait()``
    has returned the checkpoint's paths; ``after(i)`` then, untimed. Stops early when what is left of
    the deadline would not hold another one."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    stalls, synced, durable, files = [], [], [], (None, None)
    for i in range(count):
        if durable and deadline.left() < 2 * max(durable):
            break
        sync()  # the training work before the save is not the save's
        start = time.perf_counter()
        wait = save(i)
        stalls.append(time.perf_counter() - start)
        sync()  # copies queued on the device but not waited for by the caller
        synced.append(time.perf_counter() - start)
        paths = wait()
        durable.append(time.perf_counter() - start)
        files = files_of(paths)
        if after is not None:
            after(i)
    return {"checkpoints": len(stalls), "stall_s": stalls, "stall_synced_s": synced, "durable_s": durable,
            "files": files[0], "bytes": files[1]}


def fastpipe_saves(model, optimizer, device, folder: Path):
    """What Checkpointer.save does on one process: the finite-weights check (its one synchronisation),
    the RNG states, then BackgroundWriter.submit of the whole state."""
    from fastpipe.checkpoint.policy import finite_state
    from fastpipe.checkpoint.state import rng_state
    from fastpipe.checkpoint.background import BackgroundWriter

    writer = BackgroundWriter(folder, keep=2)

    def save(i):
        if (~finite_state(model)).float().item() > 0:
            raise RuntimeError("the weights hold NaN/inf")
        writer.submit({"position": {"step": i + 1}, "rng": [rng_state(device)], "model": model.state_dict(),
                       "optimizer": optimizer.state_dict()})

        def wait():
            writer.wait()
            return [writer.written, writer.written.with_suffix(".json")]
        return wait
    return save


def dcp_saves(model, optimizer, folder: Path):
    import torch.distributed.checkpoint as dcp

    def save(i):
        with warnings.catch_warnings():  # "... uninitialized, assuming the intent is to save in a single process"
            warnings.filterwarnings("ignore", message=".*single process")
            future = dcp.async_save({"model": model.state_dict(), "optim": optimizer.state_dict()},
                                    checkpoint_id=folder / f"dcp-{i}")

        def wait():
            done = getattr(future, "upload_completion", future)  # an AsyncSaveResponse under async staging
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*single process")
                done.result()
            return [folder / f"dcp-{i}"]
        return wait
    return save


def dcp_drop(folder: Path):
    return lambda i: shutil.rmtree(folder / f"dcp-{i}", ignore_errors=True)  # measured: keep the disk free


@contextlib.contextmanager
def one_rank_group():
    """A 1-rank gloo process group (FileStore in a temporary folder), destroyed afterwards."""
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", store=dist.FileStore(str(Path(tmp) / "store"), 1), rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


def compare_writers(a, deadline: Deadline, jsonl: Path, publish) -> list:
    """The writers alone, in this process: fastpipe's BackgroundWriter and DCP's async_save, each
    --writer-checkpoints times; one row per writer, failed rows instead of exceptions."""
    rows = []
    base = {"table": "writers", "model": a.model, "device": "cuda" if not a.smoke else "cpu"}
    why = deadline.skip_reason("writer fastpipe")  # before building the model
    if why:
        for name in WRITERS:
            rows.append(dict(base, writer=WRITER_NAMES[name], status="skipped", reason=why))
            append_jsonl(jsonl, rows[-1])
        publish(rows)
        return rows
    try:
        import torch

        base["torch"] = torch.__version__
        device = torch.device(base["device"])
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        model, optimizer = build_model(a, device)
        if device.type == "cuda":
            base["device"] = torch.cuda.get_device_name(device)
    except Exception as exc:  # noqa: BLE001 - a benchmark row, not a crash
        for name in WRITERS:
            rows.append(dict(base, writer=WRITER_NAMES[name], status="failed", reason=f"setup: {one_line(exc)}"))
            append_jsonl(jsonl, rows[-1])
        publish(rows)
        return rows
    root = a.out / "checkpoints"  # the session scripts' archives leave out folders of this name
    for name in WRITERS:
        row = dict(base, writer=WRITER_NAMES[name], process_group=None)
        why = deadline.skip_reason(f"writer {name}")
        started = time.monotonic()
        if why:
            row.update(status="skipped", reason=why)
        else:
            folder = root / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            try:
                if name == "fastpipe":
                    row.update(time_checkpoints(fastpipe_saves(model, optimizer, device, folder), device,
                                                a.writer_checkpoints, deadline))
                else:
                    row.update(measure_dcp(model, optimizer, device, folder, a.writer_checkpoints, deadline))
                row["status"] = "ok"
            except Exception as exc:  # noqa: BLE001
                row.update(status="failed", reason=one_line(exc))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        deadline.record(f"writer {name}", time.monotonic() - started)
        if row.get("stall_s"):
            row.update(stall_median_s=statistics.median(row["stall_s"]), stall_max_s=max(row["stall_s"]),
                       stall_synced_median_s=statistics.median(row["stall_synced_s"]),
                       durable_median_s=statistics.median(row["durable_s"]))
        rows.append(row)
        append_jsonl(jsonl, row)
        publish(rows)
    shutil.rmtree(root, ignore_errors=True)
    return rows


def measure_dcp(model, optimizer, device, folder: Path, count: int, deadline: Deadline) -> dict:
    """async_save as it comes; if it raises without a process group, again inside a 1-rank gloo one."""
    import torch.distributed as dist

    try:
        return time_checkpoints(dcp_saves(model, optimizer, folder), device, count, deadline, dcp_drop(folder))
    except Exception as exc:  # noqa: BLE001
        if dist.is_available() and dist.is_initialized():
            raise
        first = one_line(exc)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        with one_rank_group():
            result = time_checkpoints(dcp_saves(model, optimizer, folder), device, count, deadline, dcp_drop(folder))
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"{one_line(exc)} (in a 1-rank gloo group; without one: {first})") from exc
    return dict(result, process_group=f"gloo, 1 rank (FileStore); without one: {first}")


def writers_table(a, rows: list) -> str:
    done = [r.get("checkpoints") for r in rows if r.get("checkpoints")]
    torch_version = next((r["torch"] for r in rows if r.get("torch")), "?")
    title = (f"The writers alone, in this process: {a.model} with SGD(momentum=0.9) after 2 steps, the model's and "
             f"optimizer's state; {'/'.join(map(str, sorted(set(done)))) if done else a.writer_checkpoints} "
             f"checkpoints each, timed from a synchronised device; device {rows[0].get('device', '?')}, "
             f"torch {torch_version}")

    def written(row):
        if row.get("bytes") is None:
            return None
        return f"{row['files']} files, {row['bytes'] / 2 ** 20:,.1f} MiB"

    columns = [("writer", "writer"), ("stall median s", "stall_median_s", ".4f"), ("stall max s", "stall_max_s", ".4f"),
               ("durable median s", "durable_median_s", ".3f"), ("files/bytes written", written),
               ("status", lambda r: status_text(r) + (f" (process group: {r['process_group']})"
                                                      if r.get("process_group") else ""))]
    notes = ["stall: until the call returns to the training thread (fastpipe: the finite-weights check, its one "
             "synchronisation, and queuing the copies into reused host buffers, pinned on CUDA; async_save: with "
             "its defaults); durable: until the checkpoint is written and fsynced (BackgroundWriter.wait(), "
             "future.result()); files/bytes of one checkpoint (fastpipe's with its sidecar .json). "
             "checkpoint_stall.jsonl has each checkpoint's times and the stall until the device is synchronised "
             "after the call (stall_synced_s)."]
    return write_markdown_table(None, rows, columns, title, notes)


def publish_tables(a, rows: list, writer_rows: list) -> str:
    """checkpoint_stall.md: the runs' table, then the writers' one; written whole (never half a table)."""
    text = write_table(a, rows)
    if writer_rows:
        text += "\n" + writers_table(a, writer_rows)
    path = a.out / "checkpoint_stall.md"
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return text


def main(argv=None) -> int:
    a = parse_args(argv)
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(a.deadline, floor_s=5 if a.smoke else 45)
    jsonl = a.out / "checkpoint_stall.jsonl"
    jsonl.write_text("")
    rows, writer_rows = [], []
    with open(a.out / "checkpoint_stall.log", "w") as log:
        for r in range(a.repeats):
            runs = [("none", 0), (f"every {a.every}", a.every)]
            for name, every in (runs if r % 2 == 0 else runs[::-1]):
                why = deadline.skip_reason(name)
                res = skipped(why) if why else run_fastpipe(overrides(a, every), a.out / "runs" / f"every{every}-{r}",
                                                            deadline.timeout(a.timeout), log)
                deadline.record(name, res.get("wall_s"))
                rows.append(row_of(name, every, r, res, a))
                append_jsonl(jsonl, rows[-1])
                text = publish_tables(a, rows, writer_rows)
    if not a.no_dcp:
        writer_rows = compare_writers(a, deadline, jsonl, lambda done: publish_tables(a, rows, done))
        text = publish_tables(a, rows, writer_rows)
    print(text)
    return 0 if all(r["status"] == "ok" for r in rows + writer_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
