"""The benchmark scripts' CPU smoke modes, so the scripts the GPU numbers come from cannot rot. The scripts
run in the test's process, and so do the Python commands they start through lib/runner.py (fastpipe, the
hand loops): ``_commands_here``. What needs a process of its own has its own check: run_command's timeout
and process group, h200_plan.sh's shell, the stack sampler."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark_runs import BENCH, commands_here as _commands_here, here as _here
from conftest import REPO, load_benchmark_runner, needs_dali

# the runs here, in this process, decode JPEGs with torchvision (as the packs' own tests do)
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")

# data_formats.py's JPEG decoders in its smoke: the script passes data.decoder on as any other; DALI's own
# decoding, a training run through it included, is tests/unit/data/test_pack_dali.py's
SMOKE_DECODERS = ("cpu",)
SMOKE_SHAPES = ["dataset=shapes", "dataset.source_size=[96,72]", "dataset.num_images=320", "dataset.image_size=32",
                "dataset.augment=true"]  # data_formats.py --smoke's dataset
BESIDE_SHAPES = SMOKE_SHAPES + ["train.batch_size=4"]


def _check_overhead(out):
    """overhead.py --smoke's results (run by phase 1 of h200_plan.sh below)."""
    rows = [json.loads(line) for line in (out / "overhead.jsonl").read_text().splitlines()]
    assert {r["runner"] for r in rows} == {"hand", "fastpipe"}
    assert all(r["status"] == "ok" and r["throughput"] > 0 for r in rows)
    table = (out / "overhead.md").read_text()
    assert "| resnet18 | off |" in table and "x |" in table


def _load_trace_summary():
    import importlib.util

    spec = importlib.util.spec_from_file_location("trace_summary", BENCH / "lib" / "trace_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_every_benchmark_script_imports_and_prints_its_usage(script, monkeypatch):
    """Each script's imports resolve from the benchmarks folder as its recipe runs it (``lib.runner``,
    its sibling scripts): a renamed helper fails here, not at the start of a device call. Run as
    ``__main__`` in this process, its folder first on sys.path as ``python benchmarks/SCRIPT`` puts it."""
    import io
    import runpy

    monkeypatch.setattr(sys, "argv", [str(BENCH / script), "--help"])
    monkeypatch.setattr(sys, "path", [str(BENCH), *sys.path])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as end:
        runpy.run_path(str(BENCH / script), run_name="__main__")
    assert end.value.code == 0 and "usage:" in out.getvalue(), err.getvalue()[-2000:]


def test_trace_summary_reads_busy_time_exposed_collectives_and_gaps(tmp_path):
    """A hand-made trace of two 10 ms steps: compute on stream 7, an all-reduce on stream 20 that
    overlaps compute for 1 ms and runs alone for 2 ms, a 3 ms idle gap while the host synchronises."""
    ts = _load_trace_summary()

    def ev(cat, name, start, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": start, "dur": dur, "pid": 0, "tid": args.pop("tid", 1),
                "args": args}
    events = [ev("user_annotation", "ProfilerStep#5", 0, 10_000), ev("user_annotation", "ProfilerStep#6", 10_000, 10_000),
              ev("kernel", "conv", 0, 4_000, stream=7), ev("kernel", "ncclAllReduce", 3_000, 3_000, stream=20),
              ev("kernel", "conv", 9_000, 11_000, stream=7),
              ev("kernel", "ncclDevKernel_Broadcast_RING_LL(args)", 19_000, 10, stream=20),
              ev("cuda_runtime", "cudaStreamSynchronize", 6_000, 3_000, tid=1),
              ev("cpu_op", "aten::item", 6_000, 3_000),
              ev("cpu_op", "aten::long_op_elsewhere", 0, 6_010, tid=2),  # touches the gap by 10 us only
              ev("kernel", "late", 25_000, 1_000, stream=7)]  # after the last step: not counted
    path = tmp_path / "t.pt.trace.json.gz"
    import gzip
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events + [{"ph": "i", "name": "marker", "ts": 1}]}, f)
    text = ts.summarize(ts.load_events(path))
    assert "2 profiled steps, 20.0 ms: 10.00 ms per step" in text
    assert "GPU busy 85.0% of the span" in text  # 0-6 ms and 9-20 ms
    assert "stream 7: busy 15.0 ms, 2 activities" in text  # the kernel after the last step is left out
    assert "stream 20: busy 3.0 ms, 2 activities (2 NCCL)" in text
    assert "NCCL kernels 3.0 ms, of which 2.00 ms" in text
    assert "ncclDevKernel_Broadcast_RING_LL on stream 20: 0.5 per step" in text
    assert "ncclAllReduce on stream 20: 0.5 per step, 1.50 ms per step, 1.00 ms exposed" in text  # per kind
    assert "cudaStreamSynchronize" in text and "1.50 ms" in text  # 3 ms over 2 steps
    assert "GPU idle 1.50 ms per step (15.0% of the span); gaps >= 50 us: 1 (0.5 per step)" in text
    assert "aten::item (tid 1)" in text and "long_op_elsewhere" not in text.split("gaps >= 50 us")[1]
    assert ts.subtract([[0, 10]], [[2, 3], [5, 12]]) == [(0, 2), (3, 5)]
    assert ts.subtract([[10, 20], [0, 5]], [[12, 13], [1, 2]]) == [(0, 1), (2, 5), (10, 12), (13, 20)]  # unsorted
    assert "zero length" in ts.summarize([ev("user_annotation", "ProfilerStep#1", 5, 0)])
    proc = _script("lib/trace_summary.py", path)
    assert proc.returncode == 0 and "GPU busy" in proc.stdout


# ---------------------------------------------------------------- benchmarks/lib/runner.py (pure: fast)


# A stand-in for `python -m fastpipe`: FAKE_MODE says how it ends; it writes metrics.json where
# hydra.run.dir points, as fastpipe does.
FAKE_FASTPIPE = r'''
import json, os, subprocess, sys, time
from pathlib import Path
run_dir = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("hydra.run.dir=")))
run_dir.mkdir(parents=True, exist_ok=True)
mode = os.environ["FAKE_MODE"]
print("fake fastpipe started", flush=True)
if mode == "hang":  # a child of its own, as fastpipe's training process or DDP workers
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (run_dir / "child.pid").write_text(str(child.pid))
    time.sleep(60)
elif mode == "error":
    print("fastpipe: error: train.batch_size=0 must be >= 1", file=sys.stderr)
    sys.exit(2)
elif mode == "hydra":
    print("Could not override 'launcher.static_graph'.\nTo append to your config use +launcher.static_graph=true\n"
          "Key 'static_graph' not in 'DdpLauncherConfig'\n    full_key: launcher.static_graph\n\n"
          "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", file=sys.stderr)
    sys.exit(1)
elif mode == "failed-run":
    (run_dir / "metrics.json").write_text(json.dumps({"status": "failed", "reason": "out of memory with train.batch_size=512"}))
    sys.exit(1)
elif mode == "ok":
    (run_dir / "metrics.json").write_text(json.dumps({"status": "ok", "throughput": 123.0}))
'''


def _fake(runner, tmp_path, monkeypatch):
    script = tmp_path / "fake_fastpipe.py"
    script.write_text(FAKE_FASTPIPE)
    monkeypatch.setattr(runner, "FASTPIPE", [sys.executable, str(script)])


def _gone(pid: int) -> bool:
    import time

    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return True
        if "\nState:\tZ" in state:  # exited, waiting for its (new) parent to reap it
            return True
        time.sleep(0.1)
    return False


def test_runner_timeout_kills_the_process_group_and_returns_a_failed_row(tmp_path, monkeypatch):
    runner = load_benchmark_runner()
    _fake(runner, tmp_path, monkeypatch)
    with open(tmp_path / "run.log", "w") as log:
        row = runner.run_fastpipe(["x=1"], tmp_path / "run", 2, log, env={"FAKE_MODE": "hang"})
    assert row["status"] == "failed" and row["reason"] == "timed out after 2 s (process group killed)"
    assert 2 <= row["wall_s"] < 15 and row["run_dir"] == str(tmp_path / "run")
    assert _gone(int((tmp_path / "run" / "child.pid").read_text()))  # the grandchild went with the group
    text = (tmp_path / "run.log").read_text()
    assert "fake fastpipe started" in text and "killed after 2 s (timeout)" in text and "hydra.run.dir=" in text


def test_runner_failed_runs_say_why(tmp_path, monkeypatch):
    runner = load_benchmark_runner()
    _fake(runner, tmp_path, monkeypatch)

    def run(mode):
        with open(tmp_path / "run.log", "a") as log:
            return runner.run_fastpipe(["x=1"], tmp_path / mode, 60, log, env={"FAKE_MODE": mode})

    error = run("error")
    assert (error["status"], error["reason"], error["exit_code"]) == ("failed", "train.batch_size=0 must be >= 1", 2)
    assert run("hydra")["reason"].startswith("Could not override 'launcher.static_graph'.")
    assert "Key 'static_graph' not in 'DdpLauncherConfig'" in run("hydra")["reason"]
    assert run("failed-run")["reason"] == "out of memory with train.batch_size=512"  # the run's own record
    missing = run("missing")
    assert missing["status"] == "failed" and missing["reason"].startswith("no metrics.json in ")
    ok = run("ok")
    assert ok["status"] == "ok" and ok["throughput"] == 123.0 and ok["wall_s"] > 0
    (tmp_path / "missing" / "metrics.json").write_text('{"status": "ok"}')  # an earlier run's result
    assert run("missing")["status"] == "failed"  # is never read as this run's: the folder is emptied first


def test_runner_reasons_from_real_fastpipe(tmp_path):
    """run_fastpipe's and config_refusal's reasons from what fastpipe itself prints (in this process)."""
    with _commands_here() as runner, open(tmp_path / "run.log", "w") as log:
        bad_value = runner.run_fastpipe(["train.batch_size=0"], tmp_path / "a", 120, log)
        bad_key = runner.run_fastpipe(["launcher.no_such_key=1"], tmp_path / "b", 120, log)
        refusal = runner.config_refusal(["launcher=no_such_launcher"], log)
    assert bad_value["status"] == "failed" and "train.batch_size=0" in bad_value["reason"], bad_value
    assert bad_value["exit_code"] == 2, bad_value
    assert bad_key["reason"].startswith("launcher.no_such_key is not a key of SingleLauncherConfig (its keys: "), bad_key
    assert bad_key["reason"].endswith("; fix the spelling"), bad_key
    assert "no_such_launcher" in refusal


# ---------------------------------------------------------------- the scripts, in this process


def _script(name, *args, timeout=300):
    return subprocess.run([sys.executable, str(BENCH / name), *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


# h200_plan.sh's PY under the test: each Python command of the plan is handed to the test's process (the
# `plan` fixture runs it there and writes ASK.done), then what it printed is printed and its exit code
# returned, so the shell's streams, logs and exit codes are as they would be. The versions line (-c, no
# torch import) runs as it is.
PLAN_PY = r"""#!PYTHON
import json, os, sys, time
if sys.argv[1:2] == ["-c"]:
    os.execv("PYTHON", ["PYTHON", *sys.argv[1:]])
ask = os.path.join(os.environ["PLAN_COMMANDS"], f"{time.time_ns()}-{os.getpid()}")
with open(ask + ".tmp", "w") as f:
    json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}, f)
os.rename(ask + ".tmp", ask + ".json")
deadline = time.time() + 900  # a test process that died never answers
while not os.path.exists(ask + ".done"):
    if time.time() > deadline:
        sys.exit("no answer from the test's process")
    time.sleep(0.02)
with open(ask + ".done") as f:
    done = json.load(f)
sys.stdout.write(done["stdout"])
sys.stderr.write(done["stderr"])
sys.exit(done["code"])
"""


def _serve(shell: subprocess.Popen, box: Path, timeout: float) -> list:
    """Run the commands PLAN_PY hands over, in this process, one at a time (the plan's two streams wait for
    each other's) until the shell ends; their argv, in the order served."""
    served, deadline = [], time.monotonic() + timeout
    try:
        while shell.poll() is None or list(box.glob("*.json")):
            asks = sorted(box.glob("*.json"))
            if not asks:
                assert time.monotonic() < deadline, f"h200_plan.sh still running after {timeout} s"
                time.sleep(0.02)
                continue
            for ask in asks:
                job = json.loads(ask.read_text())
                ask.unlink()
                env = {k: v for k, v in job["env"].items()  # what the shell set: FASTPIPE_CACHE, ...
                       if os.environ.get(k) != v and k not in ("_", "PWD", "OLDPWD", "SHLVL")}
                done = _here([sys.executable, *job["argv"]], env=env, cwd=job["cwd"])
                reply = box / f"{ask.stem}.reply"
                reply.write_text(json.dumps({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}))
                reply.rename(box / f"{ask.stem}.done")
                served.append(job["argv"])
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
    return served


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """SMOKE=1 phase 1 of h200_plan.sh, run by bash with its Python commands run in this process
    (PLAN_PY): (its folder, the shell's CompletedProcess, the commands it ran)."""
    import tempfile

    folder = tmp_path_factory.mktemp("plan")
    box, py = folder / "commands", folder / "python"
    box.mkdir()
    py.write_text(PLAN_PY.replace("PYTHON", sys.executable))
    py.chmod(0o755)
    # DEADLINE_SMOKE: the smoke's 180 s are for a person's quick look; here the streams take turns
    env = dict(os.environ, SMOKE="1", WORK=str(folder / "work"), OUT=str(folder / "out"), PY=str(py),
               PLAN_COMMANDS=str(box), DEADLINE_SMOKE="600")
    with _commands_here(), tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        shell = subprocess.Popen(["bash", str(BENCH / "h200_plan.sh"), "1"], cwd=REPO, env=env, stdout=out,
                                 stderr=err, text=True, start_new_session=True)
        served = _serve(shell, box, timeout=300)
        out.seek(0), err.seek(0)
        return folder, subprocess.CompletedProcess(shell.args, shell.returncode, out.read(), err.read()), served


def test_lm_handloop_smoke(plan):
    """lib/lm_handloop.py --smoke's JSON line: lm.py --smoke (phase 1 below) runs it as its hand loop, its
    output written into lm.log."""
    folder, proc, _ = plan
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (folder / "work" / "lm" / "lm.log").read_text()
    assert "lm_handloop.py " in log and " --device cpu --smoke" in log, log[-3000:]
    lines = [line for line in log.splitlines() if line.startswith('{"runner": "hand"')]
    assert len(lines) == 1, log[-3000:]
    result = json.loads(lines[0])
    assert result["tokens_per_s"] > 0 and result["step_ms_median"] > 0 and result["mfu"] is None  # no peak for a CPU
    from fastpipe.models import GPT

    import torch
    gpt = GPT(vocab_size=256, seq_len=32, n_layer=4, n_head=4, n_embd=128)  # gpt_tiny at 32 tokens: fastpipe's count
    assert result["flops_per_sample"] == gpt.flops_per_sample(torch.zeros(1, 32, dtype=torch.long))


def _table_rows(path) -> dict:
    return _table_rows_text(path.read_text())


def _table_rows_text(text: str) -> dict:
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip().strip("|").split("|")]
                                          for line in text.splitlines() if line.startswith("| ") and "---" not in line)}


def _check_lm(out):
    """lm.py --smoke --repeats 1's results (phase 1 below)."""
    rows = _table_rows(out / "lm.md")
    assert rows["hand"][-1] == "ok" and rows["fastpipe"][-1] == "ok"
    assert rows["fastpipe"][4].endswith("x") and float(rows["fastpipe"][2].replace(",", "")) > 0  # vs hand
    runs = [json.loads(line) for line in (out / "lm.jsonl").read_text().splitlines()]
    assert {r["run"] for r in runs} == {"hand", "fastpipe"} and all(r["tokens_per_s"] > 0 for r in runs)
    metrics = json.loads((out / "runs" / "fastpipe-0" / "metrics.json").read_text())
    assert metrics["choices"]["task"] == "lm" and metrics["tokens_per_s"] > 0


def _check_checkpoint_stall(tmp_path):
    """checkpoint_stall.py --smoke's results (phase 1 below)."""
    rows = _table_rows(tmp_path / "checkpoint_stall.md")
    assert rows["none"][-1] == "ok" and rows["every 6"][-1] == "ok" and rows["every 6"][3].endswith("x")
    assert list((tmp_path / "runs" / "every6-0" / "checkpoints").glob("step-*.pt"))
    assert not (tmp_path / "runs" / "every0-0" / "checkpoints").exists() or not list(
        (tmp_path / "runs" / "every0-0" / "checkpoints").glob("step-*.pt"))
    table = (tmp_path / "checkpoint_stall.md").read_text()
    assert "| writer | stall median s | stall max s | durable median s | files/bytes written | status |" in table
    for writer in ("fastpipe BackgroundWriter", "dcp async_save"):  # async_save needs no process group on CPU
        assert rows[writer][-1] == "ok", table
        assert float(rows[writer][1]) > 0 and float(rows[writer][3]) > 0 and rows[writer][4].startswith("2 files")
    writers = [r for r in map(json.loads, (tmp_path / "checkpoint_stall.jsonl").read_text().splitlines())
               if r.get("table") == "writers"]
    assert [(r["writer"], r["checkpoints"], r["process_group"]) for r in writers] == [
        ("fastpipe BackgroundWriter", 2, None), ("dcp async_save", 2, None)]
    assert not (tmp_path / "checkpoints").exists()  # the comparison's checkpoints are deleted once measured


def test_checkpoint_stall_refuses_a_checkpoint_on_a_window_edge(tmp_path):
    bad = _script("checkpoint_stall.py", "--out", tmp_path, "--warmup", "20", "--window", "10")  # step 50 on an edge
    assert bad.returncode == 2 and "window edge" in bad.stderr


def test_h200_plan_phase1_smoke(plan):
    """SMOKE=1 phase 1 on this CPU: the two streams' commands (overhead.py then checkpoint_stall.py; the
    prep run then lm.py), every table and the archive in OUT/p1, at most 8 files, the tables printed last;
    the smoke modes it ran give their full results."""
    import tarfile

    folder, proc, served = plan
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    work, logs = folder / "work", folder / "work" / "logs-p1"
    ran = {argv[0]: argv[1:] for argv in served}
    assert sorted(ran) == ["benchmarks/checkpoint_stall.py", "benchmarks/lib/runner.py", "benchmarks/lm.py",
                           "benchmarks/overhead.py"], served
    order = [argv[0] for argv in served]
    assert order.index("benchmarks/overhead.py") < order.index("benchmarks/checkpoint_stall.py")
    assert order.index("benchmarks/lib/runner.py") < order.index("benchmarks/lm.py")
    for script, args in (("overhead.py", ["--out", f"{work}/overhead", "--smoke"]),
                         ("checkpoint_stall.py", ["--out", f"{work}/ckpt", "--smoke"]),
                         ("lm.py", ["--out", f"{work}/lm", "--smoke", "--repeats", "1"])):
        mine = ran[f"benchmarks/{script}"]
        assert mine[:-2] == args and mine[-2] == "--deadline" and 5 <= int(mine[-1]) <= 600, mine
    prep = ran["benchmarks/lib/runner.py"]  # the JPEG folder and its pack, by one step of a tiny model
    head, overrides = prep[:prep.index("--")], prep[prep.index("--") + 1:]
    assert head[:6] == ["--jsonl", f"{logs}/runs.jsonl", "--name", "prep", "--out", f"{work}/prep"], prep
    assert head[-2:] == ["--log", f"{logs}/prep.log"] and "dataset.num_images=320" in overrides, prep
    assert overrides[-5:] == ["model=tiny_cnn", "device=cpu", "launcher.fresh_process=false", "data=mmap",
                              "train.max_steps=1"], prep
    rows = [json.loads(line) for line in (logs / "runs.jsonl").read_text().splitlines()]
    assert [(r["name"], r["status"]) for r in rows] == [("prep", "ok")] and (work / "prep.done").is_file()
    assert (work / "prep" / "metrics.json").is_file()

    out = folder / "out" / "p1"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint_stall.md", "gpu.txt", "lm.md", "overhead.md",
                                                     "phase1.tgz"]
    assert "torch" in (out / "gpu.txt").read_text() and "cpu cores" in (out / "gpu.txt").read_text()
    for folder_, table, first in (("overhead", "overhead.md", "resnet18"), ("lm", "lm.md", "fastpipe"),
                                  ("ckpt", "checkpoint_stall.md", "every 6")):
        assert (out / table).read_text() == (work / folder_ / table).read_text()  # the final table
        assert _table_rows(out / table)[first][-1] == "ok", (out / table).read_text()
    with tarfile.open(out / "phase1.tgz") as tar:
        names = tar.getnames()
    assert "logs-p1/runs.jsonl" in names and "lm/lm.jsonl" in names and "overhead/overhead.log" in names
    assert "logs-p1/stream-gpu0.log" in names and "prep/metrics.json" in names and "ckpt/checkpoint_stall.md" in names
    assert not [n for n in names if n.endswith((".pt", ".fppack"))]  # checkpoints and packs stay behind
    assert proc.stdout.index("== overhead.md") > proc.stdout.index("== phase 1: ")  # the phase ends with its tables
    assert "== lm.md" in proc.stdout and "== gpu.txt" in proc.stdout
    _check_overhead(work / "overhead")
    _check_checkpoint_stall(work / "ckpt")
    _check_lm(work / "lm")


def test_time_to_target_overhead_smoke(tmp_path):
    """time_to_target_overhead.py --smoke, both phases on this CPU: each phase's files, the start-up rows
    against the hand loop's first batch, the sampled start-up's timeline written (sampling itself: below),
    the runs' files packed, the one job's breakdown and ratio."""
    import tarfile

    out, work = tmp_path / "out", tmp_path / "work"
    with _commands_here():
        # without the batch search and the evaluation pairs (their tables: below)
        proc = _here([sys.executable, BENCH / "time_to_target_overhead.py", "--smoke", "--phase", "all", "--out", out,
                      "--work", work, "--no-search", "--eval-pairs", "0"], cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = ["runs.tgz", "ttt_overhead.jsonl", "ttt_overhead.log", "ttt_overhead.md"]
    assert sorted(p.name for p in (out / "p1").iterdir()) == sorted(files + ["timeline-mmap-sampled-0.txt"])
    assert sorted(p.name for p in (out / "p2").iterdir()) == files
    rows = [json.loads(line) for line in (out / "p1" / "ttt_overhead.jsonl").read_text().splitlines()]
    assert [(r["name"], r.get("kind"), r["status"]) for r in rows] == [
        ("prep (the JPEG folder and its pack)", None, "ok"), ("hand loop, first batch #1", "hand", "ok"),
        ("fastpipe data=mmap #1", "start-mmap", "ok"), ("fastpipe data=mmap (sampled) #2", "sampled", "ok")]
    assert rows[1]["first_batch_s"] > rows[1]["imports_s"] > 0 and rows[1]["images"] > 0
    start = _table_rows(out / "p1" / "ttt_overhead.md")
    assert start["hand loop, first batch #1"][1:3] != ["—", "—"] and start["hand loop, first batch #1"][-1] == "ok"
    row = start["fastpipe data=mmap #1"]  # the smoke leaves out data=default's start-up
    # in this process its imports came before it: its largest parts are those after them
    assert row[-1] == "ok" and float(row[1]) > 0 and float(row[2]) > 0 and "launch" in row[3], row
    with tarfile.open(out / "p1" / "runs.tgz") as tar:
        packed = tar.getnames()
    assert {"prep/metrics.json", "prep/graph.txt", "start-mmap-0/metrics.json", "start-mmap-sampled-0/metrics.json"} \
        <= set(packed), packed
    jobs = _table_rows(out / "p2" / "ttt_overhead.md")
    row = jobs["compile=off train.batch_size=16"]  # the smoke's sweep of one job
    assert row[-1] == "ok" and float(row[6]) > 0, row  # wall
    assert row[9] == "no" or float(row[8]) > 0, row  # reached: its end-to-end time over train
    assert "== " not in proc.stdout and "## The four jobs" in proc.stdout  # the tables, printed last


def test_sampled_commands_sample_each_python_process_they_start(tmp_path, monkeypatch):
    """time_to_target_overhead.py's sampled start-ups (in this process above, so unsampled): its
    sampler_env makes every Python process a command starts sample its threads' stacks (lib/sampler), and
    the timeline shows that process, its command line and what its main thread did."""
    import importlib

    monkeypatch.syspath_prepend(str(BENCH))
    ttt = importlib.import_module("time_to_target_overhead")
    samples = tmp_path / "samples"
    busy = "import time\nstart = time.time()\nwhile time.time() - start < 0.5:\n    pass\n"
    proc = subprocess.run([sys.executable, "-c", busy, "busy-loop"], env=dict(os.environ, **ttt.sampler_env(samples)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = ttt.timeline(samples)
    assert text.count("## pid ") == 1 and f"(parent {os.getpid()})" in text and ": -c busy-loop" in text, text
    busy_segments = [line for line in text.splitlines() if "<string>:<module>" in line]
    assert busy_segments and max(float(line.split()[2]) for line in busy_segments) >= 0.3, text


def test_time_to_target_overhead_eval_pairs_and_search_tables(tmp_path, monkeypatch):
    """What the smoke above leaves out: the evaluation pairs (the training batch, auto, and twice it,
    alternating, each a row with its evaluations, their seconds and share of training) and the batch
    search's probes, from the rows fastpipe's runs give."""
    import importlib

    monkeypatch.syspath_prepend(str(BENCH))
    ttt = importlib.import_module("time_to_target_overhead")
    a = ttt.parse_args(["--out", str(tmp_path), "--smoke", "--eval-pairs", "2", "--pair", "train.eval_fold=false,auto"])
    ran = []

    class Phase:
        rows = []

        def fastpipe(self, kind, overrides, run_dir, deadline, cap, **kw):
            ran.append((kind, next(o for o in overrides if o.startswith("train.eval_fold="))))
            return {"status": "ok", "time_breakdown_s": {"eval": 1.0, "train": 10.0},
                    "target": {"reached": True, "steps": 40, "curve": [{}] * 4}}

        def add(self, row):
            self.rows.append(row)

    phase = Phase()
    phase.a = a
    ttt.eval_pairs(phase, ttt.Deadline(600))
    assert ran == [("pair-false", "train.eval_fold=false"), ("pair-auto", "train.eval_fold=auto")] * 2
    pairs = _table_rows_text(ttt.eval_table(phase.rows))
    assert pairs["train.eval_fold=auto #2"] == ["train.eval_fold=auto #2", "4", "1.00", "0.250", "10.0",
                                               "10.0%", "step 40", "ok"]
    search = _table_rows_text(ttt.search_table([{"kind": "search", "status": "ok", "setup_parts_s": {"batch_search": 3.0},
                                                 "batch_size_search": {"chosen": 32, "seconds": 2.5, "probes": [
                                                     {"batch_size": 32, "fits": True, "samples_per_s": 900.0,
                                                      "seconds": 1.0},
                                                     {"batch_size": 64, "fits": False, "why": "out of memory",
                                                      "seconds": 0.5}]}}]))
    assert search["32"][:3] == ["32", "True", "900"] and search["64"][-1] == "out of memory"


def test_ddp_smoke_with_its_profile_run(tmp_path, monkeypatch):
    """ddp.py --smoke --profile: the single run, the DDP run and the profiled DDP run, their table and
    ratios, the profile's trace summarized by lib/trace_summary.py. The DDP runs' commands are composed as
    they are, then trained in this process on one rank (DDP itself, the profile on rank 0 and the comm hook
    included: test_ddp.py; the table's processes column and ratio: the --variant test below)."""
    import importlib

    from conftest import make_settings

    out, composed = tmp_path / "out", []
    with _commands_here():
        ddp = importlib.import_module("ddp")
        real = ddp.run_fastpipe

        def one_rank(overrides, run_dir, timeout_s, log, **kw):
            if "launcher=ddp" in overrides:
                settings = make_settings(overrides)
                composed.append((Path(run_dir).name, settings.launcher.nproc_per_node, settings.profile))
                overrides = [o for o in overrides if not o.startswith("launcher")] + ["launcher=single"]
            return real(overrides, run_dir, timeout_s, log, **kw)

        monkeypatch.setattr(ddp, "run_fastpipe", one_rank)
        proc = _here([sys.executable, BENCH / "ddp.py", "--smoke", "--out", out, "--profile"], cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert [(name, nproc, profile.name) for name, nproc, profile in composed] == [
        ("ddp", 2, "off"), ("profile", 2, "on")], composed
    profile = composed[1][2]
    assert (profile.wait, profile.warmup, profile.active) == (2, 1, 5)  # past the 2 warm-up steps
    table = (out / "ddp.md").read_text()
    assert "| launcher=single | 1 |" in table and "| launcher=ddp nproc_per_node=2 |" in table
    assert "| profile=on ddp |" in table and table.count("| ok |") == 3, table
    assert "launcher=ddp nproc_per_node=2 / single: " in table and "single: n/a" not in table
    assert "profile=on ddp / single: " in table and "(profiled: timing distorted)" in table
    log = (out / "ddp.log").read_text()
    assert "launcher=ddp launcher.nproc_per_node=2 profile=on profile.wait=2" in log  # config_refusal's --cfg job
    assert "fastpipe run summary" in log
    rows = [json.loads(line) for line in (out / "ddp.jsonl").read_text().splitlines()]
    assert [r["run"] for r in rows] == ["launcher=single", "launcher=ddp nproc_per_node=2", "profile=on ddp"]
    assert all(r["throughput"] > 0 and r["run_dir"] == str(out / "runs" / f) for r, f in
               zip(rows, ("single", "ddp", "profile")))
    traces = list((out / "runs" / "profile" / "profile").glob("*.pt.trace.json*"))
    assert len(traces) == 1, traces
    summary = _script("lib/trace_summary.py", traces[0])
    assert summary.returncode == 0 and "5 profiled steps" in summary.stdout, summary.stdout + summary.stderr


# A stand-in for `python -m fastpipe` under ddp.py: every config composes; a run records its command line.
FAKE_DDP_RUN = r'''
import json, sys
from pathlib import Path
if "--cfg" not in sys.argv:
    run_dir = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("hydra.run.dir=")))
    run_dir.mkdir(parents=True, exist_ok=True)
    world = 2 if "launcher=ddp" in sys.argv else 1
    (run_dir / "metrics.json").write_text(json.dumps({"status": "ok", "throughput": 100.0 * world, "argv": sys.argv[1:],
                                                      "env": {"world_size": world}}))
'''


def test_ddp_variants_are_extra_ddp_runs_with_their_overrides(tmp_path, monkeypatch):
    """ddp.py --variant (what the smoke above leaves out): the variant's config composed first, then a DDP run
    with its overrides after the DDP run's, a row and a ratio to the single run; fastpipe is a stand-in."""
    import importlib

    monkeypatch.syspath_prepend(str(BENCH))
    ddp = importlib.import_module("ddp")
    fake = tmp_path / "fake_fastpipe.py"
    fake.write_text(FAKE_DDP_RUN)
    monkeypatch.setattr(sys.modules["lib.runner"], "FASTPIPE", [sys.executable, str(fake)])
    out = tmp_path / "out"
    variant = "bf16:launcher.comm_hook=bf16 launcher.bucket_cap_mb=1"
    assert ddp.main(["--smoke", "--out", str(out), "--variant", variant]) == 0
    table = (out / "ddp.md").read_text()
    assert "| ddp bf16 | 2 |" in table and table.count("| ok |") == 3 and "ddp bf16 / single: 2.00x" in table
    argv = json.loads((out / "runs" / "bf16" / "metrics.json").read_text())["argv"]
    assert argv[-5:-1] == ["launcher=ddp", "launcher.nproc_per_node=2", "launcher.comm_hook=bf16",
                           "launcher.bucket_cap_mb=1"] and argv[-1].startswith("hydra.run.dir="), argv
    assert "launcher.comm_hook=bf16 launcher.bucket_cap_mb=1 --cfg job" in (out / "ddp.log").read_text()


@pytest.fixture(scope="module")
def data_formats(tmp_path_factory):
    """data_formats.py --smoke with every kind of step, training and reading the JPEG pack only (the raw
    pack's read: in the test), then lib/decode_beside_step.py on the packs it made, at batch 4 (its
    ResNet-50 steps in bf16 autocast cost a CPU without bf16 units about a second per 4 images); both in
    this process: (the folder, data_formats.py's CompletedProcess, decode_beside_step.py's)."""
    import fastpipe.data.pack.jpeg as jpeg
    import fastpipe.data.pack.source as source

    folder = tmp_path_factory.mktemp("data-formats")
    work, py = folder / "work", sys.executable
    with _commands_here(), pytest.MonkeyPatch.context() as mp:
        env = {"FASTPIPE_CACHE": work / "cache"}  # the dataset: generated in the smoke's own work folder
        formats = _here([py, BENCH / "data_formats.py", "--smoke", "--out", folder / "out", "--work", work,
                         "--steps", "generate,pack,train,read,profile", "--codecs", "jpeg",
                         "--decoders", ",".join(SMOKE_DECODERS)], env=env, cwd=REPO)
        # decode_beside_step.py times the decoder and swaps the gather function for its run: put back after it
        mp.setattr(jpeg.Decoder, "__call__", jpeg.Decoder.__call__)
        mp.setattr(source, "gather", source.gather)
        beside = _here([py, BENCH / "lib" / "decode_beside_step.py", "--raw", work / "pack-raw.fppack",
                        "--jpeg", work / "pack-jpeg.fppack", "--out", folder / "beside", "--eager", "--warmup", "1",
                        "--steps", "1", "--variants", "raw,jpeg+data.decode_workers=1+burn=1,alone:jpeg", "--",
                        *BESIDE_SHAPES], env=env, cwd=REPO)
    return folder, formats, beside


def test_data_formats_smoke_trains_reads_and_profiles_the_jpeg_pack_with_each_decoder(data_formats, tmp_path,
                                                                                      monkeypatch):
    """benchmarks/data_formats.py --smoke with every kind of step, on the JPEG pack (--codecs jpeg): a row each,
    the decoder named in each JPEG run's graph.txt, and the profile step's trace summary (and the small trace,
    gzipped) in OUT; then its raw pack's rows from the script's own steps."""
    folder, proc, _ = data_formats
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = folder / "out"
    rows = {r["step"]: r for r in map(json.loads, (out / "data_formats.jsonl").read_text().splitlines())}
    assert set(rows) == {"generate the JPEG folder", "pack raw", "pack jpeg",
                         *(f"{kind} jpeg ({d} decode)" for kind in ("train", "read", "profile") for d in SMOKE_DECODERS)}
    assert all(r["status"] == "ok" for r in rows.values()), rows
    assert rows["generate the JPEG folder"]["images"] == rows["pack raw"]["images"] == rows["pack jpeg"]["images"] == 320
    assert rows["pack jpeg"]["bytes_per_image"] < rows["pack raw"]["bytes_per_image"]
    for d in SMOKE_DECODERS:
        assert rows[f"train jpeg ({d} decode)"]["img_per_s"] > 0 and rows[f"read jpeg ({d} decode)"]["img_per_s"] > 0
        assert f"codec=jpeg  decoder={d}" in (out / "runs" / f"train-jpeg-{d}-decode" / "graph.txt").read_text()
        summary = (out / f"profile-jpeg-{d}.txt").read_text()
        assert f"codec=jpeg  decoder={d}" in summary and "5 profiled steps" in summary
        assert 0 < (out / f"profile-jpeg-{d}.pt.trace.json.gz").stat().st_size < 5_000_000
    assert "| step | img/s |" in (out / "data_formats.md").read_text() and "| step | img/s |" in proc.stdout
    _raw_pack_rows(folder / "work", tmp_path, monkeypatch)


def _raw_pack_rows(work, tmp_path, monkeypatch):
    """data_formats.py's rows of the raw pack (--codecs raw) with the script's own commands: its read, evicted
    first, by lib/pack_read.py in this process; its training run's overrides composed (the training of a raw
    pack: test_learning.py)."""
    import importlib
    import io
    from types import SimpleNamespace

    from conftest import make_settings

    monkeypatch.setenv("FASTPIPE_CACHE", str(work / "cache"))  # the smoke's dataset, not generated again
    trained = []
    with _commands_here():
        df = importlib.import_module("data_formats")
        monkeypatch.setattr(df, "run_fastpipe", lambda overrides, *args, **kw: trained.append(overrides) or {"status": "ok"})
        a = SimpleNamespace(smoke=True, images=None, work=work, out=tmp_path, timeout=200)
        s, deadline, log, raw = df.settings(a), df.Deadline(None), io.StringIO(), work / "pack-raw.fppack"
        read = df.read(a, s, "raw", "auto", True, log, deadline)
        assert df.train(a, s, "raw", "auto", log, deadline)["step"] == "train raw"
    assert (read["step"], read["status"], read["cold"], read["pack_bytes"]) == (
        "read raw, evicted first", "ok", True, raw.stat().st_size), read
    assert read["first_img_per_s"] > 0 and read["img_per_s"] > 0 and "pack_read.py --pack" in log.getvalue()
    settings = make_settings(trained[0])
    assert settings.data.path == str(raw) and settings.data.decoder == "auto" and settings.train.epochs == 1


def test_decode_beside_step_smoke_trains_each_loader_variant_in_one_process(data_formats):
    """lib/decode_beside_step.py on data_formats.py --smoke's packs: a row each, in the order given, the
    decoders named, the loader alone far faster."""
    folder, _, proc = data_formats
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (folder / "beside" / "decode_beside_step.jsonl").read_text().splitlines()]
    assert [r["variant"] for r in rows] == ["raw", "jpeg+data.decode_workers=1+burn=1", "alone:jpeg"]
    assert all(r["img_per_s"] > 0 and 0 <= r["data_wait_frac"] <= 1 for r in rows), rows
    # raw decodes nothing; the workers decode in their own processes; the threads (read ahead: perhaps all
    # before the measured steps) in this one
    assert rows[0]["decode_calls"] == 0 and rows[1]["decode_calls"] == 0 and "threads)" in rows[2]["loader"]
    assert "decoder=cpu (1 worker process" in rows[1]["loader"]
    assert rows[2]["img_per_s"] > 3 * rows[1]["img_per_s"]  # no step to wait for
    assert "variant | tag | img/s" in proc.stdout


def _rows(out) -> dict:
    table = (out / "loaders.md").read_text()
    assert "| loader | img/s | data-wait % | warm-up s | status |" in table
    return {c[0]: c for c in ([x.strip() for x in line.strip("|").split("|")]
                              for line in table.splitlines() if line.startswith("| ") and "---" not in line)}


def _loaders_script(monkeypatch):
    """benchmarks/loaders.py as a module (imported as its recipe runs it, from the benchmarks folder)."""
    import importlib

    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("loaders")


@needs_dali
def test_loader_benchmark_smoke(tmp_path, monkeypatch):
    """benchmarks/loaders.py --smoke --loaders dali: the run, tiny, on the CPU, its table row; each other
    loader's smoke overrides compose into its settings (the loaders themselves: test_learning.py)."""
    from conftest import make_settings

    out = tmp_path / "out"
    with _commands_here():
        proc = _here([sys.executable, BENCH / "loaders.py", "--out", out, "--smoke", "--loaders", "dali"], cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _rows(out)
    assert list(rows) == ["loader", "dali"], rows
    assert rows["dali"][-1] == "ok" and float(rows["dali"][1].replace(",", "")) > 0, rows["dali"]
    assert 0 <= float(rows["dali"][2]) <= 100 and float(rows["dali"][3]) >= 0  # the table rounds to 0.1 s
    metrics = json.loads((out / "dali" / "metrics.json").read_text())
    assert metrics["choices"]["data"] == "dali" and metrics["warmup_s"] > 0 and metrics["steps"] == 10
    assert len((out / "loaders.jsonl").read_text().splitlines()) == 1
    assert "shapes-" in proc.stdout.split("\n", 1)[0] and "| dali |" in proc.stdout  # the dataset line, the table
    loaders = _loaders_script(monkeypatch)
    a = loaders.parse_args(["--out", str(out), "--smoke"])
    assert a.loaders == ["default", "mmap", "dali"]  # what a plain --smoke runs
    for name in a.loaders:
        settings = make_settings(loaders.overrides_for(name, a))
        assert type(settings.data).__name__.lower() == f"{name}loaderconfig" and settings.train.max_steps == 10


def test_loader_benchmark_failed_loader_is_a_row_with_the_reason(tmp_path):
    """A run that fastpipe refuses is a row with fastpipe's reason; the table still written."""
    with _commands_here():
        proc = _here([sys.executable, BENCH / "loaders.py", "--out", tmp_path, "--smoke", "--loaders", "dali",
                      "dali:data.no_such_key=1"], cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-2000:]
    reason = _rows(tmp_path)["dali"][-1]
    assert reason.startswith("failed: data.no_such_key is not a key of DaliLoaderConfig (its keys: "), reason
    assert "num_threads" in reason and reason.endswith("; fix the spelling"), reason
