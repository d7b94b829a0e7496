"""One gloo rank of two running optimizer.lr=auto's range test (tests/integration/test_lr_find.py), by
``torch.multiprocessing`` from the test: each rank reports its curve and suggestion."""
from __future__ import annotations


def range_test_on_rank(rank: int, store_path: str, overrides: list, out: dict) -> None:
    import torch
    from conftest import make_settings

    from fastpipe.runtime import Dist, Runtime, cache_root, seed_everything
    from fastpipe.finders import lr_range

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", store=torch.distributed.FileStore(store_path, 2), rank=rank,
                                         world_size=2)
    try:
        settings = make_settings(overrides)
        seed_everything(settings.seed + rank)
        search = lr_range.find_lr(settings, Runtime(torch.device("cpu"), Dist(rank, 2, rank, 2), cache_root(), 1))
        out[rank] = (search.curve, search.suggestion)
    finally:
        torch.distributed.destroy_process_group()
