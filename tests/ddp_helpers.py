"""Test-only models for tests/test_ddp.py, importable by ``model._target_`` (tests/ on PYTHONPATH).

``CrashOnRank`` trains like TinyCNN but fails on one rank in the middle of training, while the
other ranks wait in a collective: what a crashed GPU or a bug on one node looks like.
"""
from __future__ import annotations

import os
import time

from fastpipe.models import TinyCNN


class CrashOnRank(TinyCNN):
    """TinyCNN whose ``forward`` raises on rank ``rank`` (RANK from the launcher) at call ``at_call``."""

    def __init__(self, num_classes: int = 4, rank: int = 1, at_call: int = 3, how: str = "raise") -> None:
        super().__init__(num_classes)
        # Read here, not in fastpipe: the rank is a test fixture's business, not the model's.
        self.crashes = int(os.environ.get("RANK", "0")) == rank
        self.at_call, self.how, self.calls = at_call, how, 0

    def forward(self, x):
        self.calls += 1
        if self.crashes and self.training and self.calls == self.at_call:
            if self.how == "exit":  # a hard crash: no exception, no error file (like a segfault)
                os._exit(3)
            if self.how == "hang":  # alive but stuck: the others wait in a collective until the timeout
                while True:
                    time.sleep(1)
            raise RuntimeError(f"injected failure on rank {os.environ.get('RANK')}")
        return super().forward(x)
