"""``python -m fastpipe``: the Hydra entry point. Compose, convert, launch: a single run trains in
this process (launch/dispatch.py says where sweep jobs and repeats train)."""
from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import DictConfig

from fastpipe.cli.help import register_help_resolver
from fastpipe.cli.mistakes import explain_hydra_errors, report_like_hydra
from fastpipe.record.run_record import failed
from fastpipe.config import config_dir, job_choices, register_configs, to_settings
from fastpipe.config.keys import old_spelling_note
from fastpipe.record import results
from fastpipe.errors import EXIT_CODE, EXIT_PREEMPTED, FastpipeError, Preempted, cannot_write, unwritable
from fastpipe.runtime import process_state_kept
from hydra_plugins.fastpipe_sweeps import register as register_sweep_plugins

EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C
CONFIG_NAME = "config"  # conf/config.yaml
_RUN_FOLDER: list = []  # a single run's folder, said first and last
_COMMANDS: list = []  # when each command this process ran began (Unix time; `python -m fastpipe`: the process's start)

register_configs()
register_help_resolver()  # --help's groups and each key's meaning (conf/hydra/help/fastpipe.yaml)
explain_hydra_errors(CONFIG_NAME)  # fastpipe's line after Hydra's message for a config it cannot compose
register_sweep_plugins()  # Hydra's plugin scan misses them under an editable install run from elsewhere


@hydra.main(version_base="1.3", config_path=config_dir(), config_name=CONFIG_NAME)
def run(cfg: DictConfig):
    """One job: returns its metrics (a sweep's callbacks read them from metrics.json). What the job sets
    in this process (the environment, torch's switches, signal handlers) is put back as it ends: a
    sweep's next job, or a program calling fastpipe again, starts from the same state."""
    with process_state_kept():
        return _run(cfg)


def _run(cfg: DictConfig):
    from fastpipe.launch.dispatch import import_trainer, own_job_process
    from fastpipe.record import finished_run
    from fastpipe.runtime import quiet_library_info

    hc = HydraConfig.get()
    sweep = hc.mode == RunMode.MULTIRUN
    own_process = own_job_process(sweep, str(hc.launcher.get("_target_", "")))
    if not sweep:  # a sweep's report names its jobs' folders
        say_run_folder_first(hc)
    # the end-to-end clock's start: the command's for one run; a sweep's job's own, in the sweep's process
    # (its imports paid once) or in a process started for it alone (from fastpipe's import there)
    started_at = (clock_started_at() if own_process else time.time()) if sweep \
        else (_COMMANDS[-1] if _COMMANDS else clock_started_at())
    quiet_library_info()
    import_trainer()
    run_dir = Path(hc.runtime.output_dir)
    choices = job_choices(hc.runtime.choices, cfg)
    overrides = list(hc.overrides.task)
    found = results.read(run_dir)
    earlier = found.get("run_id") if isinstance(found, dict) else None  # an earlier run's record in this folder
    try:
        return _launched(hc, cfg, sweep, own_process, started_at, run_dir, choices, overrides, earlier)
    finally:
        if not sweep:  # a resumed finished run this launch did not train: its folder as it was
            finished_run.put_back(run_dir)


def _launched(hc, cfg, sweep: bool, own_process: bool, started_at: float, run_dir: Path, choices: dict,
              overrides: list, earlier) -> dict:
    """The job launched, its record, and the exit its status asks for."""
    from fastpipe.launch.dispatch import launch, refused, resolve_fresh_process
    from fastpipe.launch.repeats import finished_metrics, launch_repeats
    from fastpipe.record.hydra_context import run_context
    from fastpipe.record.loggers import preflight
    from fastpipe.runtime import process_environment
    from fastpipe.signals import stop_while_launching, stopped_before_training
    from fastpipe.sweeps.job_place import job_place

    try:
        with stop_while_launching():  # SIGTERM/SIGUSR1/SIGUSR2 before training begins: exit 75
            settings = to_settings(cfg, choices, check=False)
            resolve_fresh_process(settings, sweep, own_process)
            process_environment(settings)  # before the check imports the project's modules, which may touch CUDA
            settings.check()
            settings.overrides, settings.started_at = overrides, started_at
            if not sweep:
                preflight(settings.logger.values())  # a sweep checked its loggers once, before its jobs
            resume = sweep and settings.sweep.resume
            if resume:
                done = finished_metrics(run_dir, overrides)  # this job already finished ok in this folder
                if done is not None:
                    print(f"fastpipe: sweep.resume: {run_dir} finished ok earlier; skipped", flush=True)
                    return done
            settings.context = run_context(cfg, choices, overrides, job_place(hc), run_dir)
            # report.repeats runs into repeat-K/; under sweep.resume each folder stopped by a signal continues
            metrics = launch_repeats(launch, settings, run_dir, resume=resume)
    except FastpipeError as exc:  # settings that cannot work, or a stop signal before training began
        from fastpipe.runtime import full_errors

        if full_errors():
            traceback.print_exc()
        metrics = refused(run_dir, stopped_before_training() or exc, choices, overrides)
    except OSError as exc:  # the run folder's disk filled up or became read-only while launching
        if unwritable(exc) is None:
            raise
        metrics = refused(run_dir, cannot_write(unwritable(exc), run_dir), choices, overrides)
    except KeyboardInterrupt:
        metrics = interrupted(run_dir, choices, overrides, earlier)
        if metrics.get("status") == "ok":  # Ctrl-C after the results were written: they stay; the sweep stops
            print(f"fastpipe: interrupted (Ctrl-C) after the run finished; its results are kept in "
                  f"{run_dir / results.FILE}", file=sys.stderr, flush=True)
            sys.exit(EXIT_INTERRUPTED)
    status = metrics.get("status")
    if status != "ok":
        print(f"fastpipe: error: {metrics.get('reason')}", file=sys.stderr, flush=True)
        if status in ("preempted", "interrupted"):  # for the whole run or sweep
            sys.exit(EXIT_PREEMPTED if status == "preempted" else EXIT_INTERRUPTED)
        if not sweep:  # in a sweep a failed job is a row; the sweep goes on
            sys.exit(EXIT_CODE)
    return metrics


def say_run_folder_first(hc) -> None:
    """A single run's folder, said as the run begins (and again as it ends: ``main``)."""
    from fastpipe.runtime import dist_from_env

    if dist_from_env().is_main:
        _RUN_FOLDER.append(Path(hc.runtime.output_dir))
        say_run_folder()


def say_run_folder() -> None:
    """``fastpipe: run folder: PATH``, a single run's first and last line (relative to the working
    folder when it lies inside it)."""
    if _RUN_FOLDER:
        folder = _RUN_FOLDER[0]
        shown = os.path.relpath(folder) if folder.is_relative_to(Path.cwd()) else str(folder)
        print(f"fastpipe: run folder: {shown}", flush=True)


def interrupted(run_dir: Path, choices: dict, overrides: list, earlier: str = None) -> dict:
    """Ctrl-C: the trainer's own record when it wrote one (``ok`` when it came after the results were
    written: they are kept), else one naming the newest good checkpoint. ``earlier``: the run id of
    the record the folder held before this job (an earlier run's is kept as metrics.previous.json)."""
    from fastpipe.checkpoint.disk import newest_good

    kept = results.read(run_dir)
    ours = kept is not None and (earlier is None or kept.get("run_id") != earlier)
    if ours and kept.get("status") in ("interrupted", "ok"):
        return kept
    if kept is not None and not ours:
        results.begin(run_dir, choices, overrides, None)  # before the job launched: the earlier record moves aside
    latest = newest_good(run_dir / "checkpoints")
    record = failed("interrupted (Ctrl-C); " + (f"the newest good checkpoint is {latest}" if latest else
                                                 "no checkpoint was written"),
                    choices, overrides, status="interrupted", checkpoint=latest and str(latest))
    results.write_if_possible(run_dir, record)
    return record.to_dict()


def explain_failure(args: list, explanation: str = None) -> None:
    """After a failed command: one line naming today's spelling of each of fastpipe 0.1's keys on it
    (``train.lr=0.1``: Hydra says only that it cannot override ``train.lr``), else ``explanation``
    (fastpipe's line about Hydra's composition error: cli/mistakes.py)."""
    note = old_spelling_note([a for a in args if not a.startswith("-")]) or explanation
    if note:
        print(f"fastpipe: {note}", file=sys.stderr, flush=True)


def hydra_app() -> None:
    """The Hydra app; a config ``--help`` cannot compose is reported as Hydra reports a run's (exit 1)."""
    try:
        run()
    except ConfigCompositionException as exc:
        report_like_hydra(exc)


def main(started_at: Optional[float] = None) -> None:
    """The command, for a caller that goes on after it (a test, a program): raises SystemExit with the
    command's exit code, as Hydra does; what the command set in this process is put back. A single run's
    end-to-end clock starts at ``started_at`` (Unix time), by default now."""
    from fastpipe.signals import exit_on_stop_signals

    _RUN_FOLDER.clear()  # this command's own
    _COMMANDS.append(time.time() if started_at is None else started_at)
    with process_state_kept():
        exit_on_stop_signals()
        try:
            hydra_app()
        except SystemExit as exc:  # Hydra's own error (exit 1: a key it cannot compose), or a refused run
            if exc.code not in (0, None):
                explain_failure(sys.argv[1:], getattr(exc, "explanation", None))
            raise
        except Preempted as exc:  # a stop signal outside any job (between a sweep's jobs)
            print(f"fastpipe: error: {exc}", file=sys.stderr, flush=True)
            sys.exit(EXIT_PREEMPTED)
        except KeyboardInterrupt:
            print("fastpipe: error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
            sys.exit(EXIT_INTERRUPTED)
        finally:
            say_run_folder()  # last, after the summary or the error: where the run's files are


def clock_started_at() -> float:
    """When a command's clock starts in this process (Unix time): fastpipe's first import. Not the process's
    start: a process keeps its start through an exec, so under ``bash -c 'pip install ... && python -m
    fastpipe'`` the shell's start, and the install, would be on the clock. The interpreter's own start
    before that import (tens of milliseconds) is not on it."""
    import fastpipe

    return fastpipe._IMPORTED_AT


def cli() -> None:
    """``python -m fastpipe`` and the ``fastpipe`` command: ``main``, then the process ends within
    EXIT_WITHIN_S of its last line with the command's exit code, whatever threads or pools are still
    winding down (a tracker's uploader, decode workers, Inductor's compile workers): the run's record
    is written by then, and nothing the process still does can change it."""
    from fastpipe.processes import EXIT_WITHIN_S, exit_within

    code = 0
    try:
        main(started_at=clock_started_at())  # the command is this process: its clock from fastpipe's import
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    except BaseException:
        code = 1
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        exit_within(EXIT_WITHIN_S, code)


if __name__ == "__main__":
    cli()
