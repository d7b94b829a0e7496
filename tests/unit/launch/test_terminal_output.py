"""What a failure inside the training process shows on the terminal: one line for an error fastpipe
recognises (the traceback with HYDRA_FULL_ERROR=1, as Hydra's own switch does), the traceback of a
crash it does not recognise; also under launcher=ddp, whose agent logs its own stack otherwise."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from conftest import HERE_TESTS, TINY, make_settings

from fastpipe.errors import EXIT_CODE, EXIT_PREEMPTED
from fastpipe.launch import dispatch
from fastpipe.launch.handoff import settings_file

HERE = Path(__file__).resolve().parent


def worker_output(tmp_path, monkeypatch, capfd, overrides) -> tuple:
    """(exit code, stderr) of the training process's entry point, run in this process."""
    monkeypatch.syspath_prepend(str(HERE_TESTS))
    monkeypatch.setattr(dispatch, "die_with_parent", lambda parent, how: None)  # this test process has no such parent
    monkeypatch.setattr(dispatch, "take_ctrl_c_once", lambda: None)  # this process's SIGINT handler stays pytest's
    monkeypatch.setattr(dispatch, "hold_once_free", lambda folder, command: None)  # no parent to outlive here
    monkeypatch.setattr(dispatch, "exit_within", lambda seconds, code: None)  # this process goes on
    settings = make_settings(TINY + overrides)
    with pytest.raises(SystemExit) as exit_info, settings_file(settings, tmp_path) as path:
        dispatch._single_worker(path, str(tmp_path), 0)
    return exit_info.value.code, capfd.readouterr().err


@pytest.mark.parametrize("full_error", [False, True])
def test_a_recognised_error_is_one_line_and_hydra_full_error_shows_its_traceback(tmp_path, monkeypatch, capfd,
                                                                                 full_error):
    if full_error:
        monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    else:
        monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    code, err = worker_output(tmp_path, monkeypatch, capfd, ["model._target_=fault_models.ReturnsTuple"])
    assert code == EXIT_CODE
    assert ("Traceback" in err) == full_error  # the one line itself is printed by the Hydra process


def test_an_unrecognised_crash_shows_its_traceback(tmp_path, monkeypatch, capfd):
    code, err = worker_output(tmp_path, monkeypatch, capfd, ["model._target_=fault_models.CrashesInForward"])
    assert code == 1 and "Traceback" in err and "RuntimeError: a bug in the project's forward" in err


@pytest.mark.parametrize("exit_code, shown", [(EXIT_CODE, False), (EXIT_PREEMPTED, False), (1, True)])
def test_the_ddp_agent_logs_no_stack_for_a_rank_that_exited_with_fastpipes_own_code(exit_code, shown):
    """A rank that failed with an error fastpipe recognises writes its one line to its error file and
    exits EXIT_CODE (EXIT_PREEMPTED after a stop signal): the agent's own stack trace of that exit is
    dropped; any other exit keeps the agent's log."""
    from torch.multiprocessing.spawn import ProcessExitedException

    from fastpipe.launch.elastic import _QuietOnRecognisedExit

    try:
        raise ProcessExitedException(f"process 1 terminated with exit code {exit_code}", 1, 123, exit_code)
    except ProcessExitedException:
        record = logging.LogRecord("torch.distributed.elastic.multiprocessing.api", logging.ERROR, __file__, 1,
                                   "failed (exitcode: %s)", (exit_code,), sys.exc_info())
    assert _QuietOnRecognisedExit().filter(record) is shown
