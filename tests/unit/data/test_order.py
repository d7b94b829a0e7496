"""The data order: a resume on another number of processes skips exactly the samples already trained on."""
from __future__ import annotations




def test_the_epoch_order_is_skipped_over_all_processes():
    """A resume on another number of processes leaves out exactly the samples already trained on."""
    from fastpipe.data.sampler import EpochSampler, epoch_order

    data = list(range(40))
    order = epoch_order(data, seed=3, epoch=1)
    trained = order[:16]  # two processes took 8 each
    rest = []
    for rank in range(4):  # resumed on four processes
        sampler = EpochSampler(data, num_replicas=4, rank=rank, seed=3)
        sampler.set_epoch(1)
        sampler.skip_next(16 // 4)
        rest += list(sampler)
    assert sorted(rest + trained) == data and not set(rest) & set(trained)
