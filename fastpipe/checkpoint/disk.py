"""Checkpoint files: atomic writes, a size + SHA-256 sidecar, verification, listing, rotation.

``step-NNNNNNNN.pt`` (torch.save) is written to a temporary file (its SHA-256 computed as it is
written) and fsynced; then its sidecar ``step-NNNNNNNN.json`` (size, SHA-256, position) is written
durably, and only then the file is renamed to its name. A checkpoint counts as complete only when its
sidecar exists and matches, so an interrupted or damaged file is never loaded, and a process killed
at any moment leaves either no file under the final name or a complete one with its sidecar (a
sidecar without its file, from a kill before the rename, is removed at the next rotation). A file
under a checkpoint's name without a sidecar (an older fastpipe's, or a sidecar deleted) is loaded
when it loads, with a warning. A sharded checkpoint (launcher=fsdp) is a folder ``step-NNNNNNNN.dcp``
published the same way, its sidecar listing every file's size and SHA-256 (checkpoint/dcp.py writes it).
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
from fastpipe.files import atomic_write, fsync_folder

FORMAT = 1
NAME = re.compile(r"^step-(\d{8})\.(pt|dcp)$")


def _before_publish(tmp: Path) -> None:
    """Called when a checkpoint's temporary file is durable, just before its rename (a test seam)."""


def _write_durably(path: Path, data, sync_folder: bool = False, before_publish=None) -> None:
    """``data`` (bytes, or ``write(fh)``) into a temporary file, fsync, ``before_publish()`` (the sidecar),
    rename to ``path`` (then sync the folder). A failed write (a full disk, a signal) leaves nothing
    behind and raises, for a full or read-only disk, that OSError naming ``path``."""

    def before_replace(tmp: Path) -> None:
        if before_publish is not None:
            before_publish()
        if path.suffix == ".pt":
            _before_publish(tmp)

    try:
        atomic_write(path, data, sync_folder=sync_folder, before_replace=before_replace)
    except BaseException as exc:
        cause = unwritable(exc)  # also inside torch.save's RuntimeError ("unexpected pos")
        if cause is not None:
            raise OSError(cause.errno, cause.strerror, str(path)) from exc  # the file it was to become
        raise


class _Hashing:
    """A file that computes the SHA-256 and size of what is written to it (no second read of the file)."""

    def __init__(self, fh) -> None:
        self.fh, self.digest, self.size = fh, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checkpoint(folder: Path, state: dict, name: Optional[str] = None) -> Path:
    """Write ``state`` as ``folder/step-N.pt`` (or ``folder/NAME.pt``): the file, then its sidecar, then the
    file's rename to its name (module docstring); returns the .pt path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (f"{name}.pt" if name else f"step-{state['position']['step']:08d}.pt")
    written = {}

    def save(fh) -> None:
        written["file"] = _Hashing(fh)
        torch.save(state, written["file"])

    def sidecar() -> None:  # before the rename: a complete file under its name always has its sidecar
        hashed = written["file"]
        write_sidecar(path, {"format": FORMAT, "file": path.name, "bytes": hashed.size,
                             "sha256": hashed.digest.hexdigest(), "position": state.get("position")}, sync=False)

    try:
        _write_durably(path, save, before_publish=sidecar)
    except BaseException:
        if not path.exists():  # not published: its sidecar, if written, describes nothing
            path.with_suffix(".json").unlink(missing_ok=True)
        raise
    fsync_folder(folder)  # the renames themselves survive a power cut
    return path


def write_sidecar(path: Path, sidecar: dict, sync: bool = True) -> None:
    """``path``'s sidecar, written durably; ``sync``: the folder too (its entries survive a power cut)."""
    _write_durably(path.with_suffix(".json"), json.dumps(sidecar, indent=2).encode(), sync_folder=sync)


def checkpoints_in(folder: Path) -> List[Path]:
    """Checkpoint files in ``folder`` (complete or not), newest step first."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if NAME.match(p.name)), reverse=True)


def verify(path: Path, need_sidecar: bool = True) -> Optional[str]:
    """None when ``path`` is a complete checkpoint; otherwise why not."""
    sidecar = path.with_suffix(".json")
    if not sidecar.is_file():
        # a file or folder is renamed to its name after its sidecar is written: one without it lost its
        # sidecar, or is an older fastpipe's whose write was interrupted
        return "no sidecar .json (removed, or an older fastpipe's interrupted write)" if need_sidecar else None
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
        # A file under its final name was renamed there after its sidecar was written (write_checkpoint):
        # without one it is an older fastpipe's, or its sidecar was removed; it is used when it loads. A
        # sharded checkpoint's files are checked against their sidecar only.
        problem = verify(path, need_sidecar=path.is_dir())
        if problem is None:
            try:
                state = load_state(path)
            except Exception as exc:  # a pickle/zip error: unusable whatever the sidecar says
                problem = f"torch.load failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
            else:
                if not path.with_suffix(".json").is_file() and NAME.match(path.name):
                    log(f"checkpoint {path} has no sidecar (an older fastpipe's file, or its sidecar was removed): "
                        "it loads, so it is used without its SHA-256 check")
                return path, state
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
    for sidecar in folder.glob("step-*.json"):  # a kill between a sidecar and its file's rename left it
        if not sidecar.with_suffix(".pt").exists() and not sidecar.with_suffix(".dcp").exists():
            sidecar.unlink(missing_ok=True)
            removed.append(sidecar)
    return removed
