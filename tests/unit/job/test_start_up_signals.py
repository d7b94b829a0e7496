"""A stop signal (SIGTERM/SIGUSR1) in each phase of start-up ends the job preempted, exit code 75,
with what to do next: tested by phase (this process signals itself at a phase's boundary, inside the
code that runs there), not by timing. The first moments of a sweep job's fresh training process, which
need real processes, are in
tests/integration/test_signal_as_the_trainer_starts.py."""
from __future__ import annotations

import functools
import os
import signal

import pytest
import torch
from conftest import TINY, compose, make_settings, run_in_process

from fastpipe.errors import EXIT_PREEMPTED, Preempted
from fastpipe.record.results import read as read_metrics

STOPPED = "stopped by SIGTERM while starting up, before training began: nothing to checkpoint; run the same command again"


def signalling(fn):
    """``fn`` that first sends SIGTERM to this process (its handler raises where ``fn`` was called)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return fn(*args, **kwargs)

    return wrapper


def patch_phase(monkeypatch, phase: str) -> list:
    """Signal at ``phase`` of the training process's start-up; returns the run's extra overrides."""
    from fastpipe.data import images
    from fastpipe.job import training

    if phase == "runtime":
        monkeypatch.setattr(training, "setup_runtime", signalling(training.setup_runtime))
    elif phase == "first batch":  # inside the image decoder's try, which names a file it cannot read
        monkeypatch.setattr(images, "decode_rgb", signalling(images.decode_rgb))  # first read: the check's
    elif phase == "compile":  # inside the compile stage's try, which falls back to eager on a failure
        monkeypatch.setattr(torch, "compile", signalling(torch.compile))
        return ["compile=default"]
    return []


@pytest.mark.parametrize("phase", ["runtime", "first batch", "compile"])
def test_a_stop_signal_in_each_phase_of_the_trainers_start_up_is_preempted(tmp_path, monkeypatch, phase):
    extra = patch_phase(monkeypatch, phase)
    with pytest.raises(Preempted) as excinfo:
        run_in_process(tmp_path, TINY + extra)
    assert excinfo.value.exit_code == EXIT_PREEMPTED
    record = read_metrics(tmp_path)
    assert record["status"] == "preempted" and record["reason"] == STOPPED
    assert record["steps"] is None and record["compile_fallback"] is None and not record["warnings"]


def test_a_stop_signal_while_the_settings_are_converted_is_preempted(monkeypatch):
    """In the Hydra process, around a job: OmegaConf's errors become ConfigErrors there, a stop signal does not."""
    from omegaconf import OmegaConf

    from fastpipe.config import to_settings
    from fastpipe.signals import stop_while_launching

    cfg = compose(TINY)
    monkeypatch.setattr(OmegaConf, "to_object", signalling(OmegaConf.to_object))
    with pytest.raises(Preempted, match="^stopped by SIGTERM while launching, before training began"):
        with stop_while_launching():
            to_settings(cfg)


def test_a_stop_signal_outside_a_job_says_how_to_continue(capsys):
    """Composing the config, or between a sweep's jobs: exit 75 and what to run."""
    from fastpipe.signals import STOP_SIGNALS, exit_on_stop_signals

    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        exit_on_stop_signals()
        with pytest.raises(SystemExit) as exit_info:
            signal.getsignal(signal.SIGUSR1)(signal.SIGUSR1, None)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert exit_info.value.code == EXIT_PREEMPTED
    assert capsys.readouterr().err.strip() == (
        "fastpipe: error: stopped by SIGUSR1 outside a job (composing the config, or between a sweep's jobs): run "
        "the same command again; a sweep run again into the same hydra.sweep.dir with sweep.resume=true skips the "
        "jobs that finished")


def test_ddp_ranks_stopped_while_they_start_are_preempted(tmp_path, monkeypatch):
    """The elastic agent got SIGTERM before any rank could record it (they were importing): preempted."""
    import torch.distributed.launcher.api as elastic_api
    from torch.distributed.elastic.multiprocessing import SignalException

    from fastpipe.launch.elastic import launch_workers

    def stopped(config, entrypoint):
        def run(*args):
            raise SignalException("Process got signal: 15", sigval=signal.SIGTERM)
        return run

    monkeypatch.setattr(elastic_api, "elastic_launch", stopped)
    metrics = launch_workers(make_settings(TINY + ["launcher=ddp", "launcher.nproc_per_node=2"]), tmp_path)
    assert metrics["status"] == "preempted" and read_metrics(tmp_path)["status"] == "preempted"
    assert metrics["reason"] == ("stopped by SIGTERM while launcher=ddp started its 2 ranks, before training began: "
                                 "nothing to checkpoint; run the same command again")


def test_a_stop_signal_during_a_fork_pool_raises_between_its_results_and_its_workers_end_quietly(capfd):
    """Generating shapes or packing forks a pool while starting up: the signal never raises inside the
    pool's own fork hooks or queue locks (the exception would be lost there, or leave a lock held and
    the pool hung), but at the next result; the workers, forked with the stop signals at their defaults
    (signals._forking), end quietly when the pool terminates them, also one still starting (a SIGTERM
    that reached it before its signal set-up was lost, and the pool's join waited for ever)."""
    import multiprocessing

    from fastpipe import signals

    seen = []
    with signals.stop_on_signals(), pytest.raises(Preempted, match="^stopped by SIGTERM while starting up"):
        with signals.deferred(), multiprocessing.get_context("fork").Pool(2) as pool:
            for result in pool.imap_unordered(abs, range(-64, 0), chunksize=4):
                if not seen:
                    os.kill(os.getpid(), signal.SIGTERM)  # held back: the loop goes on to check()
                seen.append(result)
                signals.check()
    assert len(seen) == 1  # raised at the first check after the signal
    assert "Traceback" not in capfd.readouterr().err  # the terminated workers said nothing
