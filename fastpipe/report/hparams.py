"""TensorBoard HParams for a sweep: one experiment, one session per job.

Written with the HParams plugin's own protos (``tensorboard.plugins.hparams.summary_v2``, which
needs no TensorFlow for its ``*_pb`` builders) through torch's SummaryWriter:
``<sweep>/hparams/`` holds the experiment (every hparam with its values, every metric), and
``<sweep>/hparams/job-N/`` each job's session: its choices and status as hparams, its
measurements as scalars. ``tensorboard --logdir <sweep>/hparams`` shows the table in HPARAMS.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict

from fastpipe.report.columns import COLUMNS
from fastpipe.report.aggregate import SweepResult

# The columns HParams shows as metrics: tag, row key and description from each Column.
METRICS = [c for c in COLUMNS if c.hparam]


def session_hparams(row: dict, result: SweepResult) -> Dict[str, object]:
    """A job's hparams: every group choice, every swept key, its status and job number."""
    hparams: Dict[str, object] = {k: str(v) for k, v in row["choices"].items()}
    hparams.update({k: str(row["swept"][k]) for k in result.columns})
    hparams.update(status=row["status"], parity=row["parity"], job=float(row["job"]))
    if result.halving is not None:  # the round a pruned combination was dropped in; full = trained in full
        hparams["round"] = "full" if row.get("stage") == "full" else str(row.get("round") or "n/a")
    if row.get("gpus"):
        hparams["gpus"] = row["gpus"]
    if row.get("target") is not None:  # the target every job was measured against
        hparams["target"] = f"{row['target_metric']} {'>=' if row['target_higher'] else '<='} {row['target']:g}"
    return hparams


def write_hparams(result: SweepResult, folder: Path) -> None:
    """(Re)write ``folder`` with the sweep's HParams experiment and one session per job."""
    from tensorboard.plugins.hparams import summary_v2 as hp
    from torch.utils.tensorboard import SummaryWriter

    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)  # a rebuilt report (resume) must not list old sessions twice
    sessions = [(row, session_hparams(row, result)) for row in sorted(result.rows, key=lambda r: r["job"])]
    domains: Dict[str, set] = {}
    for _, hparams in sessions:
        for name, value in hparams.items():
            domains.setdefault(name, set()).add(value)
    declared = [hp.HParam(name, hp.Discrete(sorted(values)) if name != "job" else None)
                for name, values in domains.items()]
    metrics = [hp.Metric(c.hparam, display_name=c.hparam, description=c.description) for c in METRICS]
    with SummaryWriter(str(folder)) as writer:  # the experiment: a top-level run of its own
        writer.file_writer.add_summary(hp.hparams_config_pb(hparams=declared, metrics=metrics))
    for row, hparams in sessions:
        with SummaryWriter(str(folder / f"job-{row['job']}")) as writer:
            writer.file_writer.add_summary(hp.hparams_pb(hparams, trial_id=f"job-{row['job']}"))
            for c in METRICS:
                if row[c.key] is not None:
                    writer.add_scalar(c.hparam, float(row[c.key]), 0)
