"""Never report stale or poisoned state as good; one writer per run folder; stop signals at any moment;
resumes that change the batch or the process count; one clear line for loud failures. Real
processes and real signals, as a user's kill, Ctrl-C or scheduler would send them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from conftest import (REPO, RESUMABLE, RESUMABLE_TOTAL, SLOW_MODEL, TINY, held_model, in_process, run_in_process,
                      start_run, wait_for)
from fastpipe.errors import EXIT_CODE, EXIT_PREEMPTED


def children(pid: int) -> list:
    """The training processes ``pid`` started (from /proc): spawned workers, not multiprocessing's
    resource tracker."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in command:
            kids.append(int(stat.parent.name))
    return kids


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status  # a zombie has died; only its parent has not collected it yet


def wait_until(predicate, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


# ------------------------------------------------------------------ stale results, one writer
def test_a_killed_run_reads_as_died_never_as_the_earlier_runs_results_and_resumes(tmp_path):
    """Run 1 finishes ok; run 2 continues it in the same folder (train.resume=auto: a finished run's folder
    takes no other run) and is killed by SIGKILL (the OOM killer) mid-training: no handler runs, its record
    stays ``running``, and with the folder's lock gone with it, it reads as a run whose process died; run 1's
    record is kept aside, not reported as run 2's; train.resume=auto continues run 2 to its end."""
    from fastpipe.record import results

    first = run_in_process(tmp_path, RESUMABLE + ["train.max_steps=4"])
    assert first["status"] == "ok"
    process = start_run(tmp_path, ["train.resume=auto", *held_model(tmp_path.parent / f"{tmp_path.name}.hold")])
    wait_for(tmp_path / "checkpoints" / "step-00000006.json", process)
    process.kill()
    process.wait(timeout=30)
    assert record(tmp_path)["status"] == "running"  # nothing of the killed process ran after SIGKILL
    now = results.outcome(tmp_path)
    assert now["status"] == "failed" and now["reason"].startswith("its process died before it recorded an outcome")
    assert now["overrides"] != first["overrides"] and now["run_id"] and now["run_id"] != first["run_id"]
    kept = json.loads((tmp_path / "metrics.previous.json").read_text())
    assert kept["status"] == "ok" and kept["run_id"] == first["run_id"]
    resumed = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"])
    assert resumed["status"] == "ok" and resumed["steps"] == RESUMABLE_TOTAL


def test_a_second_run_in_a_busy_folder_is_refused_and_the_first_is_untouched(tmp_path):
    hold = tmp_path.parent / f"{tmp_path.name}.hold"  # the first run waits mid-training until it is gone
    process = start_run(tmp_path, ["train.checkpoint_every=0", *held_model(hold)])
    wait_for(tmp_path / "tb", process)
    hydra_files = {p.name: p.read_text() for p in (tmp_path / ".hydra").iterdir()}
    second = in_process([*RESUMABLE, "train.max_steps=2", f"hydra.run.dir={tmp_path}"])
    assert second.returncode == EXIT_CODE
    line = second.stderr.strip().splitlines()[-1]
    assert line.startswith(f"fastpipe: error: run folder {tmp_path} is in use by another fastpipe run (pid "
                           f"{process.pid} on ") and "give this run its own hydra.run.dir" in line
    assert {p.name: p.read_text() for p in (tmp_path / ".hydra").iterdir()} == hydra_files
    assert record(tmp_path)["status"] == "running"
    hold.unlink()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0 and record(tmp_path)["status"] == "ok", stderr.decode()[-2000:]


def test_killing_the_launching_process_stops_its_trainer_at_a_checkpoint_and_frees_the_folder(tmp_path):
    """A job in a fresh training process (a sweep's, here ``launcher.fresh_process=true``) whose launching
    process dies by SIGKILL: its trainer gets SIGTERM (the parent-death signal), checkpoints at the step's
    end, records preempted and ends; the folder's lock died with its holder, and the run resumes."""
    process = start_run(tmp_path, ["launcher.fresh_process=true",
                                   *held_model(tmp_path.parent / f"{tmp_path.name}.hold")])
    wait_for(tmp_path / "checkpoints" / "step-00000006.json", process)
    trainer = children(process.pid)[0]
    process.kill()  # SIGKILL: no handler runs in the launching process
    process.wait(timeout=30)
    wait_until(lambda: not alive(trainer), timeout=60, what="the orphaned trainer to stop")
    stopped = record(tmp_path)
    assert stopped["status"] == "preempted" and stopped["checkpoint"].endswith("step-00000007.pt"), stopped
    again = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"])
    assert again["status"] == "ok" and again["steps"] == RESUMABLE_TOTAL


def test_a_second_sweep_into_a_busy_sweep_folder_is_refused(tmp_path):
    sweep = [sys.executable, "-m", "fastpipe", "-m", *RESUMABLE, "train.checkpoint_every=0",
             "launcher.fresh_process=false",  # jobs in the sweep's process: the sweep folder's lock is the subject
             *held_model(tmp_path.parent / f"{tmp_path.name}.hold"), "seed=0,1", f"hydra.sweep.dir={tmp_path}"]
    first = subprocess.Popen(sweep, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(tmp_path / "0" / "tb", first)
    second = in_process(sweep[3:])  # the same command, from this process
    first.kill()
    first.wait(timeout=30)
    assert second.returncode == EXIT_CODE
    assert f"sweep folder {tmp_path} is in use by another fastpipe run" in second.stderr


# ------------------------------------------------------------------ stop signals at any moment
def test_a_stop_signal_during_start_up_exits_75(tmp_path):
    """SIGTERM while the shapes dataset is being generated (a fresh, large one): preempted, exit 75."""
    env = dict(os.environ, FASTPIPE_CACHE=str(tmp_path / "cache"))
    process = subprocess.Popen([sys.executable, "-m", "fastpipe", "dataset.num_images=40000", "dataset.image_size=64",
                                "runtime.progress=false", f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until(lambda: list((tmp_path / "cache").glob("shapes-*.tmp-*")), what="the generation to start")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)  # a loaded machine answers late, but answers
    assert process.returncode == EXIT_PREEMPTED, stderr.decode()[-2000:]
    m = record(tmp_path / "run")
    assert m["status"] == "preempted" and "stopped by SIGTERM while starting up, before training began" in m["reason"]
    assert "Traceback" not in stderr.decode()


def test_a_stop_signal_ends_a_sweep_with_75_whatever_the_job_was_doing(tmp_path):
    env = dict(os.environ, FASTPIPE_CACHE=str(tmp_path / "cache"))
    process = subprocess.Popen([sys.executable, "-m", "fastpipe", "-m", "dataset.num_images=40000",
                                "dataset.image_size=64", "seed=0,1", "runtime.progress=false",
                                f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until(lambda: list((tmp_path / "cache").glob("shapes-*.tmp-*")), what="the generation to start")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)  # a loaded machine answers late, but answers
    assert process.returncode == EXIT_PREEMPTED, stderr.decode()[-2000:]
    assert not (tmp_path / "sweep" / "1").exists() and not (tmp_path / "sweep" / "best.yaml").exists()


def test_sigint_to_a_single_run_records_it_and_exits_130_within_5_s(tmp_path):
    """``kill -INT`` of a single run (not its group): the loop gets it directly, the run records the
    interruption and its newest checkpoint and the process ends with 130 at once, instead of training on
    (here: held in step 7 for ever) until the run ends."""
    process = start_run(tmp_path, held_model(tmp_path.parent / f"{tmp_path.name}.hold"))
    wait_for(tmp_path / "checkpoints" / "step-00000006.json", process)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)  # the run is held: only the SIGINT ends it
    assert time.monotonic() - sent < 5.0 and process.returncode == 130, stderr.decode()[-2000:]
    m = record(tmp_path)
    assert m["status"] == "interrupted" and m["checkpoint"].endswith("step-00000006.pt"), m["reason"]


def test_the_process_ends_within_seconds_of_its_record_whatever_threads_remain(tmp_path):
    """A project callback leaves a thread that would hold the interpreter's exit for 120 s: the command
    still ends with its exit code a few seconds after the run recorded its outcome."""
    proc = subprocess.run([sys.executable, "-m", "fastpipe", *RESUMABLE, "train.max_steps=2", "logger=none",
                           "+callbacks.linger._target_=fault_models.LingersAtExit", f"hydra.run.dir={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0 and record(tmp_path)["status"] == "ok", proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("fastpipe: run folder:")


def test_ctrl_c_is_exit_130_and_one_line_naming_the_newest_checkpoint(tmp_path):
    args = [sys.executable, "-m", "fastpipe", *RESUMABLE, f"train.max_steps={RESUMABLE_TOTAL}", *SLOW_MODEL,
            f"hydra.run.dir={tmp_path}"]
    process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)  # its own process group, as a terminal's job
    wait_for(tmp_path / "checkpoints" / "step-00000003.json", process)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
    _, stderr = process.communicate(timeout=120)
    text = stderr.decode()
    assert process.returncode == 130, text[-2000:]
    assert "Traceback" not in text
    m = record(tmp_path)
    assert m["status"] == "interrupted" and m["checkpoint"] and Path(m["checkpoint"]).is_file()
    assert f"the newest good checkpoint is {m['checkpoint']}" in text.strip().splitlines()[-1]


def test_a_killed_dataloader_worker_is_one_line(tmp_path):
    conf = tmp_path / "conf" / "dataset"
    conf.mkdir(parents=True)
    (conf / "suicidal.yaml").write_text("_target_: fault_data.KillsItsWorker\n")
    proc = in_process(["--config-dir", str(tmp_path / "conf"), "dataset=suicidal", "data.num_workers=1",
                       "train.batch_size=8", "train.max_steps=4", "runtime.progress=false",
                       "model._target_=fault_models.TabularNet", f"hydra.run.dir={tmp_path / 'run'}"])
    assert proc.returncode == EXIT_CODE, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("fastpipe: error: a DataLoader worker process died") and "data.num_workers" in line
    assert "Traceback" not in proc.stderr


def test_a_jpeg_pack_with_damaged_images_ends_in_seconds_with_its_record(tmp_path):
    """Three damaged JPEGs of a pack decoded by two worker processes (data.verify=false): the run records the
    failure and the command ends within seconds, leaving no worker behind (it once hung until killed)."""
    import numpy as np

    from fastpipe.cli.pack import main as pack_main
    from fastpipe.data import shapes
    from fastpipe.data.pack.format import TRAIN
    from fastpipe.data.pack.reader import PackReader

    images = shapes.generate(tmp_path / "images", 4, 1200, (40, 30), seed=7)
    pack = tmp_path / "pack"
    assert pack_main([str(images), str(pack), "--size", "32", "--threads", "1", "--codec", "jpeg", "--no-progress"]) == 0
    reader = PackReader(pack)
    train = np.flatnonzero(reader.split == TRAIN)
    with open(pack, "r+b") as f:
        for i in train[[300, 600, 900]]:
            f.seek(reader.data_offset + int(reader.offsets[i]))
            f.write(b"\0\0")  # no SOI marker: not a JPEG any more
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fastpipe", "data=mmap", f"data.path={pack}", "dataset=imagefolder",
                             f"dataset.root={images}", "dataset.image_size=16", "data.decoder=cpu",
                             "data.decode_workers=2", "data.verify=false", "logger=none", "train.epochs=2",
                             "runtime.progress=false", f"hydra.run.dir={tmp_path / 'run'}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_CODE and time.monotonic() - start < 90
    assert f"pack {pack}: a JPEG among images " in err and "does not decode" in err
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "failed" and "does not decode" in record["reason"]
    left = []  # any process still working in the run's folder (its decode workers inherit it)
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if cwd.resolve() == tmp_path.resolve() and alive(int(cwd.parent.name)):
                left.append(int(cwd.parent.name))
        except OSError:
            continue
    assert not left


def _folder_state(folder: Path) -> dict:
    """Every file of a run folder but its lock: path -> content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".fastpipe.lock"}


def test_a_refused_or_a_no_op_resume_leaves_a_finished_run_as_it_was(tmp_path):
    """A resume the run's checkpoint cannot take (another model width) is refused, and one with nothing to
    train (no step checkpoint) ends at once: neither changes the finished run's record, .hydra/ or weights,
    which still load. A resume that trains further keeps what it wrote."""
    import fastpipe

    run = tmp_path / "run"
    args = [*RESUMABLE, "logger=tensorboard", f"hydra.run.dir={run}"]
    assert in_process(args).returncode == 0
    finished = _folder_state(run)
    refused = in_process([*args, "+model.width=64", "train.resume=auto"])
    assert refused.returncode == EXIT_CODE and _folder_state(run) == finished, refused.stderr[-2000:]
    assert fastpipe.load(run).model is not None
    assert in_process([*args, "train.epochs=1"]).returncode == EXIT_CODE  # its protection holds still

    plain = tmp_path / "plain"  # train.checkpoint_every=0: no step checkpoint to resume from
    plain_args = [*TINY, f"hydra.run.dir={plain}"]
    assert in_process(plain_args).returncode == 0
    finished = _folder_state(plain)
    again = in_process([*plain_args, "train.resume=auto", "train.max_steps=20"])
    assert again.returncode == 0 and "nothing to train" in again.stderr and _folder_state(plain) == finished

    longer = in_process([*args, "train.epochs=3", "train.resume=auto"])
    assert longer.returncode == 0 and json.loads((run / "metrics.json").read_text())["steps"] > RESUMABLE_TOTAL
