"""``autotune.json``: where it lives and how the report reads it (climb.py writes it; docs/autotune.md lists its
keys). Apart from the climb, so that the report reads it without importing what the climb imports."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from fastpipe.record import results

FILE = "autotune.json"
VERSION = 1


def read(sweep_dir: Path) -> Optional[dict]:
    """The sweep folder's autotune.json, or None when it is no autotune's (or unreadable)."""
    found = results.read(Path(sweep_dir), FILE)
    return found if isinstance(found, dict) and found.get("version") == VERSION else None
