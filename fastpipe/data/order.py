"""Where an epoch starts: a resumed run skips the batches of its epoch already trained on."""
from __future__ import annotations

def epoch_batches(loader, epoch: int, skip_batches: int):
    """An iterator over ``epoch`` of ``loader`` that starts ``skip_batches`` batches in."""
    loader.set_epoch(epoch)
    if skip_batches and getattr(loader, "skip_next", lambda n: False)(skip_batches):
        return iter(loader)  # the sampler leaves them out unread
    batches = iter(loader)
    for _ in range(skip_batches):  # a loader that cannot skip: read and drop (same order by set_epoch)
        next(batches)
    return batches

