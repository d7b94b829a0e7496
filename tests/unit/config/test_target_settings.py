"""The time-to-target settings refused in one line when they cannot work (issue 22)."""
from __future__ import annotations

import pytest
from conftest import TINY, make_settings, without_shapes

from fastpipe.config import check_target
from fastpipe.errors import ConfigError


@pytest.mark.parametrize("overrides, problem", [
    (["train.target=1.5", "train.eval_every=5"], r"outside accuracy's range \[0, 1\]"),
    (["task=lm", "dataset=tokens", "model=gpt_tiny", "train.target=-0.5", "train.eval_every=5"],
     r"outside loss's range \[0, inf\]"),
    (["train.target=0.9"], "needs train.eval_every"),
    (["train.target=nan", "train.eval_every=5"], r"train.target=nan is not a number a metric can reach"),
    (["train.target=inf", "train.eval_every=5"], r"train.target=inf is not a number a metric can reach"),
    (["train.target_eval_samples=100"], "train.target, which is not set"),
    (["train.target=0.9", "train.eval_every=5", "train.target_eval_samples=0"], "must be >= 1"),
    (["train.target_screen_risk=1"], r"must be in \[0, 1\)"),
    (["train.target_screen_risk=-0.1"], r"must be in \[0, 1\)"),
    (["train.time_budget_s=0"], "must be > 0"),
    (["train.mixup_alpha=-1"], "must be > 0"),
    (["report.objective=time_to_target"], "add train.target=VALUE"),
    (["report.objective=speed"], "time_to_target"),
    (["report.target_clock=wall"], "end_to_end"),
])
def test_bad_time_to_target_settings_are_refused(overrides, problem):
    base = [o for o in without_shapes(TINY) if "image_size" not in o] if "dataset=tokens" in overrides else TINY
    with pytest.raises(ConfigError, match=problem):
        make_settings(base + overrides)


def test_a_projects_task_may_declare_its_bounds():
    check_target(3.0, "mse", None, "mse")  # no bounds: anything goes
    check_target(0.0, "mse", (0.0, None), "mse")
    with pytest.raises(ConfigError, match=r"train.target=-1 lies outside mse's range \[0, inf\] \(task=mse"):
        check_target(-1.0, "mse", (0.0, None), "mse")
    settings = make_settings(TINY + ["train.target=0.95", "train.eval_every=5", "report.objective=time_to_target"])
    assert settings.train.target == 0.95 and settings.report.target_clock == "training"
