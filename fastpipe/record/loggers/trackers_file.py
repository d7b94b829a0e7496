"""``trackers.json``: where a run's (or a sweep's) tracker runs are, kept in its folder.

A run folder's file names each tracker's run (``{"mlflow": {"target", "tracking_uri", "run_id", "ended",
"failed"}, "wandb": {...}}``), so that ``train.resume=auto`` continues the same tracker run and the
process that started the trainer can end a run the trainer could not (it was killed). A sweep folder's
names the sweep's own (MLflow's parent run, W&B's group), which every job reads as it starts.
"""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Optional

FILE = "trackers.json"
_lock = threading.Lock()  # the loggers of one run update the file from their own threads


def read(folder: Optional[Path]) -> Dict[str, Any]:
    """The folder's trackers.json (empty when it has none, or an unreadable one)."""
    if folder is None:
        return {}
    try:
        data = json.loads((Path(folder) / FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember(folder: Path, tracker: str, **values) -> Dict[str, Any]:
    """Merge ``values`` into the folder's entry for ``tracker``; returns the entry."""
    from fastpipe.record.results import write_json_atomic

    with _lock:
        data = read(folder)
        entry = {**(data.get(tracker) or {}), **values}
        data[tracker] = entry
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_json_atomic(Path(folder) / FILE, data)
    return entry


def settle(run_dir: Path, record: Optional[dict]) -> None:
    """End the tracker runs of ``run_dir`` that its trainer began but did not end, with the run's outcome
    from ``record`` (metrics.json): called by the process that started it. A trainer killed before it could
    end them, and a logger that failed mid-run (its server gone: the trainer stopped calling it) alike:
    the tracker is asked once more, and a run it still holds RUNNING gets the record's numbers and the run
    folder's files (back-filled) and its status; a tracker still away leaves it as it has it, and a warning."""
    from fastpipe.instantiate import import_target

    for name, entry in read(run_dir).items():
        if not isinstance(entry, dict) or entry.get("ended") or not entry.get("target"):
            continue
        try:
            cls = import_target(f"logger.{name}._target_", entry["target"])
            settle_one = getattr(cls, "settle", None)
            if settle_one is not None:
                settle_one(entry, record or {}, Path(run_dir))
                remember(run_dir, name, ended=True)
                if entry.get("failed"):
                    print(f"fastpipe: the {name} run of {run_dir}, left half-logged when its logger failed, is "
                          "back-filled from the run folder and ended", file=sys.stderr, flush=True)
        except Exception as exc:  # the tracker is unreachable now: its run stays as the tracker has it
            print(f"fastpipe: warning: could not end the {name} run of {run_dir}: {type(exc).__name__}: "
                  f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}", file=sys.stderr, flush=True)
