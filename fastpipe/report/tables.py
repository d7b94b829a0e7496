"""report.md and report.csv: one row per job, fastest first, with the machine on top (header.py).

The table's columns and report.csv's fields are columns.py's ``COLUMNS``, the swept keys after ``job``."""
from __future__ import annotations

import csv
import io
from typing import List

from fastpipe.config.logger import logger_class, logger_names
from fastpipe.report.columns import COLUMNS, text_cell
from fastpipe.report.header import header_lines, primary_metric
from fastpipe.report.aggregate import SweepResult


TARGET_NOTE = ("Time to target: the clock when the first whole-split evaluation reached the target (> N s: not "
               "reached in the N s the job trained, with its best value); speed-up = the baseline's time / the row's "
               "(– when the baseline did not reach it); steps and samples up to that evaluation; compile cache = "
               "Inductor's FX-graph cache for the job's compilation (warm: every graph from the cache, cold: none, "
               "off: not compiled). ")
THROUGHPUT_NOTE = ("; with report.repeats, its median and (min-max, n=repeats), UNSTABLE past report.max_spread; "
                   "step (ms) = the median steady-state step; speed-up = throughput / the baseline's, (within noise) "
                   "where the two jobs' repeats overlap. MFU = model FLOPs (fwd+bwd, the model's own count or "
                   "torch.utils.flop_counter: metrics.json's flops_method) x samples/s over the GPU's dense datasheet "
                   "peak for the precision (bf16's for precision=fp8). warm-up/compile names a compiled job's Inductor "
                   "FX-graph cache: (cold) every graph compiled, (warm) every one from the cache, (partial), or (none): "
                   "the caches off. ")
BATCH_NOTE = "batch = the batch size each job trained at (train.batch_size=auto found it: graph.txt says how). "
GPUS_NOTE = ("gpus = the GPU(s) that measured the job: those the gpus launcher gave it (its CUDA_VISIBLE_DEVICES; "
             "cpu = none), else its CUDA device. ")
TARGET_HALVING_NOTE = ("halving: full = trained on to its end (or the target); round R = dropped after round R (status "
                       "pruned: its numbers are where it stopped). ")
RACE_NOTE = ("race: each configuration's outcome: winner, last standing (its rivals failed: untested), tie (still in "
             "the race at its end), out after round R (by job J: the sign test's p of that pair's seeds), failed; and "
             "the seeds it trained on, over which its time to target is the median (report.aggregate), with the "
             "min-max of the runs that reached the target and how many missed. ")
HALVING_NOTE = ("halving: full = trained at full length; round R = dropped after round R's probe (status pruned: the "
                "throughput is the probe's; its held-out metric is not compared). ")


def markdown(result: SweepResult) -> str:
    """The whole report.md text."""
    out = ["# fastpipe sweep report", ""] + header_lines(result) + [""] + table_lines(result)
    return "\n".join(out + ["", footer(result)]) + "\n"


def table_lines(result: SweepResult) -> List[str]:
    """The table: a header line, its rule and one line per row, in the columns ``result``'s objective shows."""
    shown = [c for c in COLUMNS if c.in_table(result)]
    metric = primary_metric(result) or "metric"
    head = [shown[0].header] + result.columns + [c.header.format(metric=metric) for c in shown[1:]]
    out = ["| " + " | ".join(text_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    for r in result.rows:
        cells = [shown[0].cell(r)] + [text_cell(r["swept"][k], 60) for k in result.columns]
        out.append("| " + " | ".join(cells + [c.cell(r) for c in shown[1:]]) + " |")
    return out


def footer(result: SweepResult) -> str:
    """What the table's numbers mean, and where each job's files are."""
    to_target = result.spec.objective == "time_to_target"
    batch = any(r.get("batch_searched") for r in result.rows)
    gpus = any(r.get("gpus") for r in result.rows)
    halving = result.halving is not None
    notes = [TARGET_NOTE if to_target else "", "Throughput is the steady state (warm-up and compilation excluded, "
             "timed apart as warm-up/compile)" + (". " if to_target else THROUGHPUT_NOTE),
             BATCH_NOTE if batch else "", GPUS_NOTE if gpus else "",
             (TARGET_HALVING_NOTE if to_target else HALVING_NOTE) if halving else "",
             RACE_NOTE if result.race is not None else "",
             f"Every job's folder holds its {_job_files(result.rows)}; the sweep's HParams are in `hparams/` "
             "(`tensorboard --logdir <sweep>/hparams`)."]
    return "".join(notes)


def _job_files(rows) -> str:
    """The files every job's folder holds, from the loggers the jobs chose (``[tensorboard,mlflow]``), in each
    registered logger's own words (its class's ``writes``)."""
    chosen = {name.strip() for r in rows for name in str((r.get("choices") or {}).get("logger") or "tensorboard")
              .strip("[]").split(",")}
    written = [getattr(logger_class(name), "writes", "") for name in logger_names() if name in chosen]
    return ", ".join(["metrics.json", "graph.txt"] + [text for text in written if text])


def csv_fields(result: SweepResult) -> List[str]:
    """report.csv's header: ``job``, the swept keys, then every column with a field, in COLUMNS' order."""
    fields = [c.key for c in COLUMNS if c.csv]
    return fields[:1] + result.columns + fields[1:]


def csv_text(result: SweepResult) -> str:
    """report.csv: the same rows, every number at full precision, the swept keys as columns."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=csv_fields(result), lineterminator="\n")
    writer.writeheader()
    for r in result.rows:
        row = {c.key: r.get(c.key) for c in COLUMNS if c.csv}
        row.update(r["swept"])
        writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return buf.getvalue()


def _csv_value(value):
    """A float at full precision, a list (the overrides) space-separated, None empty."""
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else " ".join(value) if isinstance(value, list) else value
