"""Reading faults and settings that would silently do less than they say: a shuffle buffer too small
to shuffle, a cache folder that cannot be made, a truncated JPEG under data=dali."""
from __future__ import annotations

import numpy as np
import pytest

from fastpipe.data.shardplan import LanePlan
from fastpipe.errors import ConfigError


# ------------------------------------------------------------------ data.shuffle_buffer
@pytest.mark.parametrize("buffer", [1, 64, 127])
def test_a_shuffle_buffer_below_two_samples_a_lane_is_refused_naming_the_smallest_that_shuffles(buffer):
    with pytest.raises(ConfigError, match=rf"data.shuffle_buffer={buffer} shuffles nothing: .* 64 lanes.* "
                                          r"use data.shuffle_buffer=128 or more, 0 .*, or auto"):
        LanePlan(2382, np.array([0]), 1, 0, 64, 0, buffer, True)


def test_the_smallest_accepted_shuffle_buffer_gives_each_epoch_another_order():
    """One-file pack (one piece a lane, class-sorted): 2 samples a lane already reorder every epoch."""
    plan = LanePlan(2382, np.array([0]), 1, 0, 64, 0, 128, True)
    first, second = plan.epoch(0), plan.epoch(1)
    assert sum(np.array_equal(a, b) for a, b in zip(first, second)) == 0
    lane0 = np.array([b[0] for b in first])
    assert not np.array_equal(lane0, np.sort(lane0))  # not read in the pack's order
    assert plan.shuffle_buffer == 128
