"""Checkpoint files: atomic writes, a size + SHA-256 sidecar, verification, listing, rotation.

``step-NNNNNNNN.pt`` (torch.save) is written to a temporary file, fsynced and renamed; then its
sidecar ``step-NNNNNNNN.json`` (size, SHA-256, position) the same way. A checkpoint counts as
complete only when its sidecar exists and matches, so an interrupted or damaged file is never loaded.
A sharded checkpoint (launcher=fsdp) is a folder ``step-NNNNNNNN.dcp`` published the same way, its
sidecar listing every file's size and SHA-256 (checkpoint/dcp.py writes it).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import List, Optional

import torch

from fastpipe.errors import ConfigError, unwritable
from fastpipe.files import atomic_write

FORMAT = 1
NAME = re.compile(r"^step-(\d{8})\.(pt|dcp)$")


def _before_publish(tmp: Path) -> None:
    """Called when a checkpoint's temporary file is durable, just before its rename (a test seam)."""


def _write_durably(path: Path, data, sync_folder: bool = False) -> None:
    """``data`` (bytes, or ``write(fh)``) into a temporary file, fsync, rename to ``path`` (then sync the
    folder). A failed write (a full disk, a signal) leaves nothing behind and raises, for a full or
    read-only disk, that OSError naming ``path``."""
    try:
        atomic_write(path, data, sync_folder=sync_folder,
                     before_replace=_before_publish if path.suffix == ".pt" else None)
    except BaseException as exc:
        cause = unwritable(exc)  # also inside torch.save's RuntimeError ("unexpected pos")
        if cause is not None:
            raise OSError(cause.errno, cause.strerror, str(path)) from exc  # the file it was to become
        raise


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checkpoint(folder: Path, state: dict, name: Optional[str] = None) -> Path:
    """Write ``state`` as ``folder/step-N.pt`` (or ``folder/NAME.pt``) + sidecar, atomically; returns the .pt path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (f"{name}.pt" if name else f"step-{state['position']['step']:08d}.pt")
    path.with_suffix(".json").unlink(missing_ok=True)  # rewriting a step: incomplete until the new sidecar
    _write_durably(path, lambda fh: torch.save(state, fh))
    sidecar = {"format": FORMAT, "file": path.name, "bytes": path.stat().st_size, "sha256": sha256(path),
               "position": state.get("position")}
    try:
        write_sidecar(path, sidecar)
    except BaseException:
        path.unlink(missing_ok=True)  # without its sidecar it is never loaded: not worth its space
        raise
    return path


def write_sidecar(path: Path, sidecar: dict) -> None:
    """``path``'s sidecar, written durably last: from now on ``path`` counts as complete."""
    # sync_folder: the renames themselves survive a power cut
    _write_durably(path.with_suffix(".json"), json.dumps(sidecar, indent=2).encode(), sync_folder=True)


def checkpoints_in(folder: Path) -> List[Path]:
    """Checkpoint files in ``folder`` (complete or not), newest step first."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if NAME.match(p.name)), reverse=True)


def verify(path: Path, need_sidecar: bool = True) -> Optional[str]:
    """None when ``path`` is a complete checkpoint; otherwise why not."""
    sidecar = path.with_suffix(".json")
    if not sidecar.is_file():
        return "no sidecar .json: its write was interrupted" if need_sidecar else None
    try:
        meta = json.loads(sidecar.read_text())
    except ValueError as exc:
        return f"unreadable sidecar ({exc})"
    if path.is_dir():
        return _verify_folder(path, meta.get("files") or {})
    if path.stat().st_size != meta.get("bytes"):
        return f"{path.stat().st_size} bytes, the sidecar recorded {meta.get('bytes')}: truncated"
    if sha256(path) != meta.get("sha256"):
        return "SHA-256 differs from the sidecar's: corrupt"
    return None


def _verify_folder(path: Path, files: dict) -> Optional[str]:
    """None when every file the sidecar lists is in the folder with its size and SHA-256."""
    if not files:
        return "its sidecar lists no files"
    for name, expected in sorted(files.items()):
        part = path / name
        if not part.is_file():
            return f"{name} is missing"
        if part.stat().st_size != expected.get("bytes"):
            return f"{name} is {part.stat().st_size} bytes, the sidecar recorded {expected.get('bytes')}: truncated"
        if sha256(part) != expected.get("sha256"):
            return f"{name}'s SHA-256 differs from the sidecar's: corrupt"
    return None


def load_verified(candidates: List[Path], log) -> tuple:
    """The first candidate that verifies and loads: (path, state); (None, None) when none does."""
    for i, path in enumerate(candidates):
        problem = verify(path, need_sidecar=NAME.match(path.name) is not None)  # a user's own file: load it
        if problem is None:
            try:
                return path, load_state(path)
            except Exception as exc:  # a pickle/zip error: unusable whatever the sidecar says
                problem = f"torch.load failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        rest = "falling back to the previous one" if i + 1 < len(candidates) else "no older checkpoint left"
        log(f"checkpoint {path} is not loadable: {problem}; {rest}")
    return None, None


def load_state(path: Path) -> dict:
    """A checkpoint's state: the whole file, or a sharded checkpoint's train state (its model and
    optimizer shards are read by checkpoint.dcp.load_sharded, all ranks together)."""
    if path.is_dir():
        return torch.load(path / TRAIN_STATE, map_location="cpu", weights_only=True)
    return torch.load(path, map_location="cpu", weights_only=True)


TRAIN_STATE = "train_state.pt"  # in a sharded checkpoint: everything but the model and optimizer shards


def newest_good(folder: Path) -> Optional[Path]:
    """The newest complete checkpoint in ``folder`` (its sidecar matches), or None."""
    return next((p for p in checkpoints_in(folder) if verify(p) is None), None)


def resolve_candidates(resume: str, folder: Path) -> List[Path]:
    """``train.resume`` -> the checkpoints to try, newest first (auto: this run's folder)."""
    if resume == "auto":
        return checkpoints_in(folder)
    path = Path(resume).expanduser()
    if path.is_dir() and NAME.match(path.name):  # a sharded checkpoint's folder
        return [path] + [p for p in checkpoints_in(path.parent) if p.name < path.name]
    if path.is_dir():  # a run folder or its checkpoints/ folder
        return checkpoints_in(path / "checkpoints") or checkpoints_in(path)
    if not path.is_file():
        raise ConfigError(f"train.resume={resume!r}: no such file or folder; use train.resume=auto "
                          "(the newest checkpoint of this run folder) or the path of a step-*.pt file")
    older = [p for p in checkpoints_in(path.parent) if p.name < path.name]
    return [path] + older  # a bad given file falls back to the older ones beside it


def rotate(folder: Path, keep: int) -> List[Path]:
    """Delete all but the newest ``keep`` complete checkpoints (and leftovers of interrupted writes)."""
    complete = [p for p in checkpoints_in(folder) if p.with_suffix(".json").is_file()]
    removed = []
    for path in complete[keep:]:
        path.with_suffix(".json").unlink(missing_ok=True)  # incomplete first, then gone
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        removed += [path, path.with_suffix(".json")]
    for tmp in folder.glob(".step-*.tmp-*"):  # a process killed mid-write left it; never loaded
        if not tmp.name.endswith(f".tmp-{os.getpid()}"):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    for partial in folder.glob(".step-*.dcp.partial"):  # rotation runs between sharded saves: none in flight
        shutil.rmtree(partial, ignore_errors=True)
        removed.append(partial)
    return removed
