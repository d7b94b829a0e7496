"""Write a sweep folder's report: report.md, report.csv, report.png, hparams/, best.yaml.

Called by the Hydra callback when a ``-m`` sweep ends and by ``python -m fastpipe.report DIR``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from fastpipe.errors import ConfigError
from fastpipe.files import atomic_write
from fastpipe.report import hparams, plots, tables, winner
from fastpipe.report.sweep_folder import SweepSpec, load_jobs, load_spec
from fastpipe.report.aggregate import SweepResult, aggregate

ARTEFACTS = ("report.md", "report.csv", "report.png", "hparams/", "best.yaml")


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a report (not synced: a
    report is rewritten from the run folders)."""
    atomic_write(path, text, fsync=False)


def write_report(sweep_dir: Path, spec: Optional[SweepSpec] = None, save_best: Optional[Path] = None,
                 force: bool = False) -> SweepResult:
    """Aggregate every job under ``sweep_dir`` and write all artefacts there.

    ``spec`` defaults to the sweep's ``multirun.yaml``. ``save_best`` additionally writes the winner to
    that path (a project's conf/experiment/NAME.yaml); ConfigError when there is none, or when the
    measurements do not separate the leader from the others (a tie, an unstable throughput), unless
    ``force``: then the leader, with a comment saying what it was not separated from.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ConfigError(f"sweep folder {sweep_dir} does not exist")
    jobs = load_jobs(sweep_dir)
    if not jobs:
        raise ConfigError(f"{sweep_dir} holds no sweep jobs (no */.hydra/overrides.yaml); give the "
                          "folder of a `python -m fastpipe -m ...` run (outputs/multirun/DATE/TIME)")
    result = aggregate(sweep_dir, jobs, spec if spec is not None else load_spec(sweep_dir))
    write_text_atomic(sweep_dir / "report.md", tables.markdown(result))
    write_text_atomic(sweep_dir / "report.csv", tables.csv_text(result))
    plots.write_plot(result, sweep_dir / "report.png")
    hparams.write_hparams(result, sweep_dir / "hparams")
    best_path = sweep_dir / "best.yaml"
    if result.best is not None:
        write_text_atomic(best_path, winner.winner_text(result.best, result, best_path))
    elif best_path.exists():
        best_path.unlink()  # a stale winner from an earlier report would mislead
    if save_best is not None:
        chosen = result.best if result.best is not None else result.candidate if force else None
        if chosen is None:
            raise ConfigError(refusal(result, sweep_dir, Path(save_best)))
        save_best = Path(save_best)
        save_best.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(save_best, winner.winner_text(chosen, result, save_best))
    return result


def refusal(result: SweepResult, sweep_dir: Path, path: Path) -> str:
    """--save-best's one line when there is no winner to save, naming why and what --force would write."""
    verdict, lead = result.confidence, result.candidate
    force = (f"; python -m fastpipe.report {sweep_dir} --save-best {path} --force writes job {lead['job']}, the "
             "leader, with a comment saying so" if lead is not None else "")
    if verdict.kind == "tie":
        return (f"--save-best: no winner to save: jobs {', '.join(map(str, verdict.tie))} are a tie (the measurements "
                f"do not tell them apart: report.md says how they were tested){force}")
    if verdict.kind == "untested":
        return (f"--save-best: no winner to save: one run per job does not separate job {lead['job']} from the noise "
                f"(report.md says how to test it){force}")
    if verdict.kind == "last_standing":
        return (f"--save-best: no winner to save: job {lead['job']} is the last standing, never tested against the "
                f"job(s) that failed{force}")
    if verdict.kind == "unstable":
        return (f"--save-best: no winner to save: job {lead['job']}'s repeated throughputs spread beyond "
                f"report.max_spread={result.spec.max_spread:g}, not measured well enough to rank{force}")
    return (f"--save-best: no job of {sweep_dir} qualifies (none is ok with its primary metric held, or none reached "
            "the target); see report.md")
