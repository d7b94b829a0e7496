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

import pytest
import torch

from conftest import HERE_TESTS, REPO, make_settings, run_in_process
from fastpipe.errors import EXIT_CODE, EXIT_PREEMPTED, DataError, TrainingError
from test_checkpoint import BASE, SLOW, TOTAL, _start, _wait_for


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
@pytest.mark.slow
def test_a_killed_rerun_never_reports_the_earlier_runs_results(tmp_path):
    """Run 1 finishes ok; run 2 in the same folder has its trainer killed by SIGKILL (the OOM killer):
    run 2 fails naming the signal, and run 1's record is kept aside, not reported as run 2's."""
    first = run_in_process(tmp_path, BASE + ["train.checkpoint_every=0", "train.max_steps=4"])
    assert first["status"] == "ok"
    process = _start(tmp_path, ["train.checkpoint_every=0", *SLOW])
    _wait_for(tmp_path / "tb", process)
    wait_until(lambda: children(process.pid), what="the training process")
    trainer = children(process.pid)[0]
    wait_until(lambda: record(tmp_path)["status"] == "running", what="run 2's record")
    os.kill(trainer, signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_CODE, stderr.decode()[-2000:]
    now = record(tmp_path)
    assert now["status"] == "failed" and "killed by SIGKILL" in now["reason"] and now["steps"] is None
    assert now["overrides"] != first["overrides"] and now["run_id"] and now["run_id"] != first["run_id"]
    kept = json.loads((tmp_path / "metrics.previous.json").read_text())
    assert kept["status"] == "ok" and kept["run_id"] == first["run_id"]


@pytest.mark.slow
def test_a_second_run_in_a_busy_folder_is_refused_and_the_first_is_untouched(tmp_path):
    process = _start(tmp_path, ["train.checkpoint_every=0", *SLOW])
    _wait_for(tmp_path / "tb", process)
    hydra_files = {p.name: p.read_text() for p in (tmp_path / ".hydra").iterdir()}
    second = subprocess.run([sys.executable, "-m", "fastpipe", *BASE, "train.max_steps=2",
                             f"hydra.run.dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert second.returncode == EXIT_CODE
    line = second.stderr.strip().splitlines()[-1]
    assert line.startswith(f"fastpipe: error: run folder {tmp_path} is in use by another fastpipe run (pid "
                           f"{process.pid} on ") and "give this run its own hydra.run.dir" in line
    assert {p.name: p.read_text() for p in (tmp_path / ".hydra").iterdir()} == hydra_files
    assert record(tmp_path)["status"] == "running"
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0 and record(tmp_path)["status"] == "ok", stderr.decode()[-2000:]


@pytest.mark.slow
def test_killing_the_hydra_process_kills_its_trainer_and_frees_the_folder(tmp_path):
    process = _start(tmp_path, ["train.checkpoint_every=0", *SLOW])
    _wait_for(tmp_path / "tb", process)
    trainer = children(process.pid)[0]
    process.kill()  # SIGKILL: no handler runs in the Hydra process
    process.wait(timeout=30)
    wait_until(lambda: not alive(trainer), timeout=30, what="the orphaned trainer to die")
    again = run_in_process(tmp_path, BASE + ["train.checkpoint_every=0", "train.max_steps=3"])
    assert again["status"] == "ok"  # the lock died with its holder


@pytest.mark.slow
def test_a_second_sweep_into_a_busy_sweep_folder_is_refused(tmp_path):
    sweep = [sys.executable, "-m", "fastpipe", "-m", *BASE, "train.checkpoint_every=0", "train.max_steps=40",
             *SLOW, "seed=0,1", f"hydra.sweep.dir={tmp_path}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE_TESTS), str(REPO)]))
    first = subprocess.Popen(sweep, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait_for(tmp_path / "0" / "tb", first)
    second = subprocess.run(sweep, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    first.kill()
    first.wait(timeout=30)
    assert second.returncode == EXIT_CODE
    assert f"sweep folder {tmp_path} is in use by another fastpipe run" in second.stderr


# ------------------------------------------------------------------ poisoned checkpoints
def test_a_checkpoint_is_written_only_from_finite_weights(tmp_path):
    """SGD at lr 1e6: the loss is finite at first but the updates blow the weights up. The error names
    a checkpoint whose weights are all finite, and it is still on disk."""
    with pytest.raises(TrainingError) as excinfo:
        run_in_process(tmp_path, BASE + ["optimizer=sgd", "optimizer.lr=1e6", "train.checkpoint_every=1",
                                         "train.max_nonfinite_steps=2", "train.keep_checkpoints=1",
                                         "train.max_steps=20"])
    message = str(excinfo.value)
    assert "the last good checkpoint is" in message
    named = Path(message.rsplit("the last good checkpoint is ", 1)[1].split()[0])
    assert named.is_file()
    state = torch.load(named, map_location="cpu", weights_only=True)
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
    assert record(tmp_path)["checkpoint"] == str(named)


# ------------------------------------------------------------------ resumes that change the batch
def test_a_resume_with_another_batch_size_goes_on_from_the_same_samples(tmp_path):
    first = run_in_process(tmp_path, BASE + ["train.max_steps=7"])  # batch 16: 112 samples, 7 of 11 steps
    assert first["status"] == "ok" and first["steps"] == 7
    resumed = run_in_process(tmp_path, BASE + ["train.resume=auto", "train.batch_size=32"])
    assert resumed["status"] == "ok"
    assert resumed["steps"] == 5 + 3  # 112 samples = 3 steps of 32 (96) into epoch 1; 5 steps an epoch, 2 epochs
    assert any("it goes on after 112 samples of epoch 1 and 112 in all (step 3 here)" in w
               for w in resumed["warnings"]), resumed["warnings"]


def test_a_resume_past_the_new_end_trains_nothing_and_says_so(tmp_path, capfd):
    run_in_process(tmp_path, BASE + ["train.max_steps=7"])
    done = run_in_process(tmp_path, BASE + ["train.resume=auto", "train.max_steps=5"])
    assert done["status"] == "ok" and done["steps"] == 7 and done["throughput"] is None
    assert "at or past this run's end (step 5): nothing to train" in done["reason"]
    assert "nothing to train" in capfd.readouterr().err


def test_the_epoch_order_is_skipped_over_all_processes():
    """A resume on another number of processes leaves out exactly the samples already trained on."""
    from fastpipe.data.sampler import EpochSampler, epoch_order

    data = list(range(40))
    order = epoch_order(data, seed=3, epoch=1)
    trained = order[:16]  # two processes took 8 each
    rest = []
    for rank in range(4):  # resumed on four processes
        sampler = EpochSampler(data, num_replicas=4, rank=rank, seed=3)
        sampler.set_epoch(1)
        sampler.skip_next(16 // 4)
        rest += list(sampler)
    assert sorted(rest + trained) == data and not set(rest) & set(trained)


# ------------------------------------------------------------------ stop signals at any moment
@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_ctrl_c_is_exit_130_and_one_line_naming_the_newest_checkpoint(tmp_path):
    args = [sys.executable, "-m", "fastpipe", *BASE, f"train.max_steps={TOTAL}", *SLOW, f"hydra.run.dir={tmp_path}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE_TESTS), str(REPO)]))
    process = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)  # its own process group, as a terminal's job
    _wait_for(tmp_path / "checkpoints" / "step-00000003.json", process)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
    _, stderr = process.communicate(timeout=120)
    text = stderr.decode()
    assert process.returncode == 130, text[-2000:]
    assert "Traceback" not in text
    m = record(tmp_path)
    assert m["status"] == "interrupted" and m["checkpoint"] and Path(m["checkpoint"]).is_file()
    assert f"the newest good checkpoint is {m['checkpoint']}" in text.strip().splitlines()[-1]


# ------------------------------------------------------------------ loud failures, one line each
def test_resuming_another_models_checkpoint_says_what_it_holds(tmp_path):
    run_in_process(tmp_path, BASE + ["train.max_steps=3"])
    with pytest.raises(DataError, match=r"does not fit this run's model fastpipe.models.TinyCNN: "
                                        r"features.0.0.weight is \[32, 3, 3, 3\] there, \[8, 3, 3, 3\] here"):
        run_in_process(tmp_path, BASE + ["train.resume=auto", "+model.width=8"])
    plain = tmp_path / "weights.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), plain)
    with pytest.raises(DataError, match=r"weights.pt is not a fastpipe checkpoint \(it holds \w*Dict with keys "
                                        r"'bias', 'weight'\); train.resume takes"):
        run_in_process(tmp_path / "b", BASE + [f"train.resume={plain}"])


def test_the_report_of_a_single_run_folder_is_one_line(tmp_path, capsys):
    from fastpipe.report.__main__ import main

    run_in_process(tmp_path, BASE + ["train.max_steps=3"])
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("[]\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{tmp_path} is a single run's folder, not a sweep's" in err


def test_too_many_cpu_processes_are_refused_at_once():
    settings = make_settings(["launcher=ddp", "launcher.nproc_per_node=64", "device=cpu"])
    from fastpipe.errors import ConfigError

    cores = os.cpu_count()
    with pytest.raises(ConfigError, match=f"launcher.nproc_per_node=64 but this machine has {cores} CPU core"):
        settings.launcher.processes(0, cores)


def test_a_bad_optimizer_value_names_the_key(tmp_path):
    from fastpipe.errors import ConfigError

    with pytest.raises(ConfigError, match=r"optimizer._target_='torch.optim.AdamW' failed: ValueError: Invalid "
                                          r"learning rate: -1 \(its keys: optimizer.lr=-1, "):
        run_in_process(tmp_path, BASE + ["optimizer.lr=-1"])
    with pytest.raises(ConfigError, match=r"optimizer.lr=-1"):
        run_in_process(tmp_path / "old", BASE + ["train.lr=-1"])  # the old spelling says it too


@pytest.mark.slow
def test_a_killed_dataloader_worker_is_one_line(tmp_path):
    conf = tmp_path / "conf" / "dataset"
    conf.mkdir(parents=True)
    (conf / "suicidal.yaml").write_text("_target_: fault_data.KillsItsWorker\n")
    proc = subprocess.run([sys.executable, "-m", "fastpipe", "--config-dir", str(tmp_path / "conf"),
                           "dataset=suicidal", "data.num_workers=1", "train.batch_size=8", "train.max_steps=4", "runtime.progress=false",
                           "model._target_=fault_models.TabularNet", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE_TESTS), str(REPO)])))
    assert proc.returncode == EXIT_CODE, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("fastpipe: error: a DataLoader worker process died") and "data.num_workers" in line
    assert "Traceback" not in proc.stderr
