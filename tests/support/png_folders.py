"""Small ImageFolders of random PNGs, written by the tests that need real files on disk."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def png_folder(root: Path, per_class: int = 10, side: int = 16) -> Path:
    """``root/cats`` and ``root/dogs``, ``per_class`` random ``side`` x ``side`` RGB PNGs each (seed 0)."""
    rng = np.random.default_rng(0)
    for name in ("cats", "dogs"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root
