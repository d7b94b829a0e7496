"""Which code made a run: metrics.json's ``code``, from the working folder's git repository and fastpipe's own.

``project`` is ``{commit, branch, dirty, diff_sha256}`` of the repository that holds the working folder
(null outside one). ``dirty`` counts changed tracked files and untracked files that git does not
ignore; the changes are one patch (``git diff HEAD`` plus each untracked file as a new file, so that
``git apply code.diff`` on the commit gives the tree the run saw), hashed whole (``diff_sha256``) and
kept as ``<run>/code.diff`` when it is at most ``DIFF_LIMIT`` bytes. An untracked file larger than
``UNTRACKED_LIMIT`` (or not text) enters the patch as one line naming it and its size. ``fastpipe`` is
``{version, commit}``: the commit of a source checkout fastpipe runs from, null for an installed wheel.
What fastpipe and its trackers write into the working folder is not the project's code and is not
counted: the folder holding the run folder under the working folder (``outputs/``), and what each
registered logger declares as its ``working_files`` (MLflow's ``mlflow.db``, ``mlruns/``,
``mlartifacts/``; W&B's ``wandb/``: config/logger.py, fastpipe/protocols.py).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional, Tuple

DIFF_LIMIT = 1_000_000  # bytes: a larger patch is recorded by its hash only
UNTRACKED_LIMIT = 1_000_000  # bytes: a larger untracked file is named in the patch, not copied into it
GIT_TIMEOUT_S = 20


def tracker_files() -> Tuple[str, ...]:
    """What the registered loggers write into the working folder (their ``working_files``): the trackers' own."""
    from fastpipe.config.logger import logger_class, logger_names

    return tuple(dict.fromkeys(f for name in logger_names() for f in getattr(logger_class(name), "working_files", ())))


def _git(folder: Path, *args: str) -> Optional[bytes]:
    """``git -C folder ARGS``'s output, or None when git fails (not a repository, no git, no commit)."""
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(folder), *args], capture_output=True,
                              timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _text(out: Optional[bytes]) -> Optional[str]:
    return None if out is None else (out.decode(errors="replace").strip() or None)


def _new_file_patch(top: Path, name: str) -> bytes:
    """An untracked file as git's patch of a new file (or one line when it is large or binary)."""
    path = top / name
    try:
        size = path.stat().st_size
        data = path.read_bytes() if size <= UNTRACKED_LIMIT else None
    except OSError as exc:
        return f"# untracked {name}: unreadable ({exc.strerror})\n".encode()
    if data is None or b"\0" in data:
        return f"# untracked {name}: {size} bytes, {'binary' if data else 'too large'}, not included\n".encode()
    head = f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n".encode()
    if not data:
        return f"diff --git a/{name} b/{name}\nnew file mode 100644\n".encode()
    lines = data.splitlines(keepends=True)
    body = b"".join(b"+" + line for line in lines)
    if not data.endswith(b"\n"):
        body += b"\n\\ No newline at end of file\n"
    return head + f"@@ -0,0 +1,{len(lines)} @@\n".encode() + body


def _excluded(top: Path, folder: Path, written) -> list:
    """Pathspecs leaving out what fastpipe writes: the trackers' files, and for each run folder the folder
    holding it one level below where it and the working folder part (``outputs/`` for ``outputs/DATE/TIME``
    under the working folder, wherever that is in the repository)."""
    out, folder, trackers = [], Path(folder).resolve(), tracker_files()
    for path in [folder / name for name in trackers] + [Path(w) for w in written]:
        path = path.resolve()
        try:
            rel = path.relative_to(top)
        except ValueError:  # outside the repository
            continue
        if path.name not in trackers:
            common = Path(os.path.commonpath([folder, path]))
            below = path.relative_to(common).parts
            if not below:  # the run folder is the working folder or holds it: nothing of it can be left out
                continue
            rel = (common / below[0]).relative_to(top)
        if rel.parts:
            out.append(f":(exclude){rel.as_posix()}")
    return sorted(set(out))


def project_code(folder: Path, written=()) -> Tuple[Optional[dict], Optional[bytes]]:
    """``({commit, branch, dirty, diff_sha256}, patch)`` of the repository holding ``folder``; ``(None, None)``
    outside one. The patch is None when the tree is clean. ``written``: run folders fastpipe writes."""
    top = _text(_git(folder, "rev-parse", "--show-toplevel"))
    if top is None:
        return None, None
    top = Path(top).resolve()
    spec = ["--", "."] + _excluded(top, Path(folder), written)
    commit = _text(_git(top, "rev-parse", "--verify", "-q", "HEAD"))
    branch = _text(_git(top, "symbolic-ref", "--short", "-q", "HEAD"))  # None when detached
    status = _git(top, "status", "--porcelain", "--untracked-files=all", *spec) or b""
    if not status.strip():
        return {"commit": commit, "branch": branch, "dirty": False, "diff_sha256": None}, None
    tracked = (_git(top, "diff", "HEAD", *spec) if commit else _git(top, "diff", "--cached", *spec)) or b""
    names = (_git(top, "ls-files", "--others", "--exclude-standard", "-z", *spec) or b"").split(b"\0")
    patch = tracked + b"".join(_new_file_patch(top, n.decode(errors="replace")) for n in sorted(names) if n)
    return {"commit": commit, "branch": branch, "dirty": True,
            "diff_sha256": hashlib.sha256(patch).hexdigest()}, patch


def fastpipe_code() -> dict:
    """fastpipe's version, and its commit when it runs from a git checkout of its own source."""
    package = sys.modules[__name__.partition(".")[0]]  # the running fastpipe (imported before any of its modules)
    root = Path(package.__file__).resolve().parent.parent
    top = _text(_git(root, "rev-parse", "--show-toplevel"))
    commit = _text(_git(root, "rev-parse", "--verify", "-q", "HEAD")) if top and Path(top).resolve() == root else None
    return {"version": package.__version__, "commit": commit}


def code_provenance(folder: Optional[Path] = None, written=()) -> Tuple[dict, Optional[str]]:
    """metrics.json's ``code`` for a run started in ``folder`` (the working folder) writing into the run
    folders ``written``, and the patch to keep as ``code.diff`` (None when clean or larger than DIFF_LIMIT)."""
    project, patch = project_code(Path(folder or Path.cwd()), written)
    keep = patch.decode(errors="replace") if patch is not None and len(patch) <= DIFF_LIMIT else None
    return {"project": project, "fastpipe": fastpipe_code()}, keep


def describe(code: Optional[dict]) -> str:
    """``project 1a2b3c4d (main, dirty: diff 9f8e7d6c) · fastpipe 0.2.0 (5e6f7a8b)``: one line of provenance."""
    if not code:
        return "unknown"
    project = code.get("project")
    if project is None:
        text = "project: not a git repository"
    else:
        state = f"dirty: diff {project['diff_sha256'][:12]}" if project.get("dirty") else "clean"
        where = ", ".join(x for x in (project.get("branch"), state) if x)
        text = f"project {(project.get('commit') or 'no commit')[:12]} ({where})"
    fp = code.get("fastpipe") or {}
    commit = f" ({fp['commit'][:12]})" if fp.get("commit") else ""
    return f"{text} · fastpipe {fp.get('version', '?')}{commit}"
