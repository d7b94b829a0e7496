"""Test-only models for tests/integration/test_ddp.py, importable by ``model._target_`` (tests/support on PYTHONPATH).

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


def gradients_after_ddp(rank: int, store_path: str, bucket_cap_mb: float, out: dict) -> None:
    """One gloo rank of two: wrap a small model as fastpipe does, once per comm_hook, run one backward on
    rank-specific data, and report {hook: (synchronised gradient, DDP's bucket cap)}; DDP's own bucket
    settings when bucket_cap_mb is null; then, per
    broadcast_buffers, a BatchNorm's running mean after a training and an evaluation forward (test_ddp)."""
    import torch
    from torch import nn

    from fastpipe.config import DdpLauncherConfig
    from fastpipe.train.parallel import wrap_data_parallel
    from fastpipe.runtime import Dist, Runtime

    torch.distributed.init_process_group("gloo", store=torch.distributed.FileStore(store_path, 2), rank=rank,
                                         world_size=2)
    try:
        runtime, result = Runtime(torch.device("cpu"), Dist(rank, 2, rank, 2), cache_root=None), {}
        for hook in ("none", "bf16", "fp16"):
            torch.manual_seed(0)  # the same initial weights on both ranks
            model = nn.Linear(64, 8)
            ddp = wrap_data_parallel(model, runtime, DdpLauncherConfig(comm_hook=hook, bucket_cap_mb=bucket_cap_mb))
            x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1 + rank))  # each rank its own batch
            ddp(x).square().mean().backward()
            result[hook] = (model.weight.grad.clone(), ddp.bucket_bytes_cap)
        default = wrap_data_parallel(nn.Linear(4, 4), runtime, DdpLauncherConfig())  # bucket_cap_mb=null
        result["default"] = (default.bucket_bytes_cap, default.bucket_bytes_cap_default)
        for broadcast in (True, False):
            bn = nn.BatchNorm1d(4)
            ddp = wrap_data_parallel(bn, runtime, DdpLauncherConfig(broadcast_buffers=broadcast))
            ddp(torch.randn(8, 4) + rank)  # training: each rank's statistics move its own way
            bn.eval()
            with torch.no_grad():
                ddp(torch.randn(8, 4))  # DDP re-sends rank 0's buffers first (or not); eval changes none
            result[f"broadcast_buffers={broadcast}"] = bn.running_mean.clone()
        out[rank] = result
    finally:
        torch.distributed.destroy_process_group()
