"""A screen evaluates its kept samples worst first (train/screen_order.py): a screen that misses ends
after fewer samples where the misses are the last screen's; the outcome never changes."""
from __future__ import annotations

import contextlib
import random
from types import SimpleNamespace

import pytest
import torch

from fastpipe.data.kept import KeptBatches
from fastpipe.errors import ProjectError
from fastpipe.measure.clock import RunClock
from fastpipe.stages.tasks import Classification, LanguageModelling
from fastpipe.train.held_out import HeldOut
from fastpipe.train.held_out_pass import held_out_sums
from fastpipe.train.screen_order import WorstFirst
from fastpipe.train.target import OutOfReach, Target


class Lookup(torch.nn.Module):
    """Logits that make sample ``i`` (its input is its id; its label is always 0) right where ``right[i]``."""

    def __init__(self, right: torch.Tensor) -> None:
        super().__init__()
        self.right = right

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        r = self.right[ids].float()
        return torch.stack([r, 1 - r], dim=1)


def held_out(n: int, batch: int) -> HeldOut:
    ids = torch.arange(n)
    batches = [(ids[i:i + batch], torch.zeros(len(ids[i:i + batch]), dtype=torch.long)) for i in range(0, n, batch)]
    kept = KeptBatches(batches)
    list(kept)  # the first whole pass: kept
    return HeldOut(kept, Classification(), SimpleNamespace(autocast=contextlib.nullcontext), torch.device("cpu"))


def screen(held: HeldOut, right: torch.Tensor, target: Target, order) -> tuple:
    """(the screen's mean, the samples it evaluated, whether it ended early)."""
    until = OutOfReach(target, Classification.bounds, held.loader.samples)
    sums = held_out_sums(held, Lookup(right), until=until, order=order)
    return sums.metrics(held.task)["accuracy"], sums.count, until.stopped_at is not None


def test_a_screen_missing_where_the_last_one_did_ends_at_once_and_the_outcome_is_the_same():
    n, batch = 64, 8
    target = Target(0.9, "accuracy", True, RunClock(), 1)  # at most 6 misses of 64
    first = torch.ones(n, dtype=torch.bool)
    first[40:50] = False  # the last screen's misses, late in the kept order
    second = first.clone()
    second[48:50] = True  # now 8 misses, all among the last screen's
    held, order = held_out(n, batch), WorstFirst(Classification())
    easy = Target(0.5, "accuracy", True, RunClock(), 1)
    assert screen(held, first, easy, order) == (pytest.approx(54 / 64), 64, False)  # a whole screen, in kept order
    value, seen, ended = screen(held, second, target, order)
    assert ended and seen == batch and value == 0.0  # the first batch: 8 of the last screen's misses
    kept_order = screen(held_out(n, batch), second, target, None)
    assert kept_order[2] and kept_order[1] == 48  # in the kept order it needed six batches
    whole = held_out_sums(held, Lookup(second))
    assert not target.hit(whole.metrics(held.task)["accuracy"])  # the whole subset misses too


def test_over_random_screens_the_outcome_is_the_whole_subsets_whatever_the_order():
    rng = random.Random(0)
    ended = 0
    for _ in range(200):
        n, batch = rng.randint(2, 60), rng.randint(1, 9)
        held, order = held_out(n, batch), WorstFirst(Classification())
        right = torch.tensor([rng.random() < rng.random() for _ in range(n)])
        target = Target(rng.choice([rng.random(), round(rng.random(), 1)]), "accuracy", True, RunClock(), 1)
        for _ in range(3):  # the model changes between screens: each keeps a sample wrong or flips it
            right = torch.where(torch.rand(n, generator=torch.Generator().manual_seed(rng.randint(0, 9 ** 9))) < 0.2,
                                ~right, right)
            value, seen, stopped = screen(held, right, target, order)
            whole = right.float().mean().item()
            assert target.hit(value) == target.hit(whole), (n, batch, target.value, value, whole)
            if stopped:
                ended += 1
                assert seen < n and not target.hit(value)
            else:
                assert seen == n and value == pytest.approx(whole)
    assert ended > 50  # screens that ended early were among them


def test_kept_batches_join_into_views_and_give_their_samples_in_any_order():
    images = torch.randn(10, 3, 4, 4).to(memory_format=torch.channels_last)
    batches = [((images[i:i + 4], {"id": torch.arange(i, min(i + 4, 10))}), torch.arange(i, min(i + 4, 10)))
               for i in range(0, 10, 4)]
    kept = KeptBatches(batches)
    before = [b[0][0].clone() for b in kept]
    assert kept.regroupable() and kept.sizes == [4, 4, 2]
    after = list(kept)
    assert all(torch.equal(a[0][0], b) for a, b in zip(after, before))  # the same batches, now views of the join
    assert after[1][0][0].untyped_storage().data_ptr() == kept.joined[0][0].untyped_storage().data_ptr()
    order = torch.tensor([9, 0, 5, 1, 2, 3, 4, 6, 7, 8])
    regrouped = list(kept.in_order(order))
    assert [len(b[1]) for b in regrouped] == [4, 4, 2]
    assert torch.equal(torch.cat([b[1] for b in regrouped]), order)
    assert torch.equal(torch.cat([b[0][1]["id"] for b in regrouped]), order)
    assert torch.equal(regrouped[0][0][0][0], images[9])
    assert regrouped[0][0][0].is_contiguous(memory_format=torch.channels_last)


def test_batches_that_cannot_be_regrouped_are_given_as_they_are():
    batches = [(["a.jpg", "b.jpg"], torch.tensor([0, 1])), (["c.jpg"], torch.tensor([2]))]  # a leaf of names
    kept = KeptBatches(batches)
    list(kept)
    order = WorstFirst(Classification())
    given = list(order.batches(kept))
    assert [b[0] for b in given] == [b[0] for b in batches] and not kept.regroupable()
    assert all(torch.equal(g[1], b[1]) for g, b in zip(given, batches))
    order.note(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long))  # nothing given in order: nothing kept
    assert order.worse is None


def test_a_per_sample_of_another_shape_is_refused_in_one_line():
    class Summed(Classification):
        def per_sample(self, output, target):
            return super().per_sample(output, target).sum()

    held = held_out(8, 4)
    with pytest.raises(ProjectError, match=r"per_sample\(output, target\) gives \[\] for a batch of 4 samples"):
        held_out_sums(held, Lookup(torch.ones(8, dtype=torch.bool)), order=WorstFirst(Summed()))


@pytest.mark.parametrize("task, output, target", [
    (Classification(), torch.randn(6, 5), torch.randint(0, 5, (6,))),
    (LanguageModelling(), torch.randn(3, 4, 7), torch.randint(0, 7, (3, 4))),
])
def test_the_built_in_tasks_per_sample_values_add_up_to_their_primary_metric(task, output, target):
    values = task.per_sample(output, target)
    assert values.shape == (len(target),)
    assert values.sum().item() == pytest.approx(task.metrics(output, target)[task.primary].item())
