"""What an evaluation calls for each model (``train.eval_fold``): the folded copy (stages/folding.py) with
the current weights, its first forward checked against the model's, which is evaluated instead, with a
warning, when they differ."""
from __future__ import annotations

import warnings
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import fx, nn

from fastpipe.errors import FastpipeWarning
from fastpipe.runtime import autotuning_off
from fastpipe.stages.folding import fold, fold_weights

# The folded copy's outputs may differ from the model's (relative L2, first evaluation) by the floor
# (FLOOR; under an autocast dtype at least twice its machine epsilon, 0.016 for bf16, which rounds every
# fused output), or by PRECISION_TIMES what the run's precision changes them: the copy and the model each
# differ from fp32 by about that much, the copy by more where a fused call rounds what the model keeps
# in fp32. A correct fold of ResNet-50 in bf16 on an H200 differed by 0.0056, 2.1 times it, at a first
# evaluation (benchmarks/results/time-to-target-overhead/README.md); a wrong one differs by far more.
FLOOR = 5e-3
PRECISION_TIMES = 3


def _leaves(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out.detach().float()] if out.is_floating_point() else [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for item in out for t in _leaves(item)] if isinstance(out, (list, tuple)) else []


def difference(folded_out, model_out) -> float:
    """The largest relative L2 difference over the outputs' float tensors (inf where they disagree in
    structure or in a non-float tensor)."""
    a, b = _leaves(folded_out), _leaves(model_out)
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype or not (y.is_floating_point() or torch.equal(x, y)):
            return float("inf")
        if y.is_floating_point():
            worst = max(worst, ((x - y).norm() / y.norm().clamp_min(1e-12)).item())
    return worst


class FoldedForward:
    """A model's folded copy for evaluation: ``refresh`` at each evaluation, the first call checked."""

    def __init__(self, model: nn.Module, gm: fx.GraphModule, units: list, device_type: str,
                 floor: float = FLOOR) -> None:
        self.model, self.gm, self.units, self.device_type, self.floor = model, gm, units, device_type, floor
        self.checked, self.refused = False, None  # refused: why the model runs as it is from now on

    def untuned(self, inputs):
        """The folded copy with cuDNN's benchmark mode off: its heuristics chose engines for the fused calls
        as fast as autotuning did on an H200 (ResNet-50, bf16), and autotuning them cost a run's first
        evaluation 0.6-1.3 s (benchmarks/results/eval-forward)."""
        with autotuning_off():
            return self.gm(inputs)

    def refresh(self) -> Callable:
        """What this evaluation calls: the folded copy with the current weights, or the model."""
        if self.refused is not None:
            return self.model
        fold_weights(self.units)
        return self if not self.checked else self.untuned

    def __call__(self, inputs):
        """The first forward: the folded copy's outputs if they match the model's, else the model's."""
        if self.checked:  # the rest of the first evaluation's batches
            return self.model(inputs) if self.refused is not None else self.untuned(inputs)
        self.checked = True
        expected = self.model(inputs)
        try:
            got = self.untuned(inputs)
            gap = difference(got, expected)
            own = None if gap <= self.floor else self._precisions_own(inputs, expected)  # the floor passes as it is
            allowed = max(self.floor, PRECISION_TIMES * own) if own is not None else self.floor
            if gap > allowed:
                why = (f"{PRECISION_TIMES} times the precision's own" if allowed > self.floor else
                       f"the floor; the precision's own is {own:.2g}")
                self.refused = (f"its outputs differed from the model's by {gap:.2g} (relative L2; allowed "
                                f"{allowed:.2g}: {why})")
        except Exception as exc:  # an unsupported convolution in cuDNN's fused call, say
            self.refused = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
        if self.refused is not None:
            warnings.warn(f"train.eval_fold: evaluating the model as it is: the folded copy failed its check, "
                          f"{self.refused}", FastpipeWarning)
            return expected
        return got

    def _precisions_own(self, inputs, expected) -> float:
        """The precision's own difference: the model in fp32 (untuned: a dtype met once) against ``expected``;
        only for a gap above the floor (its new cuDNN plans: 0.14-0.22 s, benchmarks/eval_parts.py)."""
        with torch.autocast(self.device_type, enabled=False), autotuning_off():
            return difference(expected, self.model(inputs))


class EvalForwards:
    """The forward each evaluated module (the model, the EMA's average) runs, folded where it can be."""

    def __init__(self, setting, device: torch.device, dtype: Optional[torch.dtype]) -> None:
        """``setting``: train.eval_fold (auto: on CUDA only; folding alone did not pay on the CPU)."""
        self.device, self.why_not = device, None
        if setting is False or (setting == "auto" and device.type != "cuda"):
            self.why_not = f"train.eval_fold={str(setting).lower()}" + (f" on {device.type}" if setting == "auto" else "")
        elif device.type == "cuda" and not (torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled):
            self.why_not = "no cuDNN"
        elif device.type not in ("cuda", "cpu"):
            self.why_not = f"not measured on {device.type}"
        # on CUDA the fused cuDNN calls (folding alone was slower than the model there); on the CPU
        # F.conv2d with the folded bias under the run's autocast
        self.dtype = (dtype or torch.float32) if device.type == "cuda" else None
        self.floor = max(FLOOR, 2 * torch.finfo(dtype).eps) if dtype is not None and dtype.is_floating_point else FLOOR
        self.forwards: Dict[int, Tuple[nn.Module, Optional[FoldedForward]]] = {}
        self.summary = ""

    def prepare(self, module: nn.Module) -> None:
        """Fold ``module`` now (at build time: graph.txt says what came of it)."""
        if self.why_not is None and id(module) not in self.forwards:
            try:
                gm, units = fold(module, self.dtype)
            except Exception as exc:  # torch.fx cannot trace it: data-dependent control flow, say
                self.forwards[id(module)] = (module, None)
                self.summary = (f"the model as it is (train.eval_fold: torch.fx could not trace it: "
                                f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:120]})")
                return
            forward = FoldedForward(module, gm, units, self.device.type, self.floor) if units else None
            self.forwards[id(module)] = (module, forward)
            fused = self.dtype is not None  # on CUDA every folded pair ends in a fused ReLU
            self.summary = self.summary or (
                f"a copy with {len(units)} Conv2d+BatchNorm2d folded" + (" with their ReLU (and residual add) into "
                                                                         "one cuDNN call each" if fused else "")
                if units else "the model as it is (train.eval_fold: no Conv2d+BatchNorm2d to fold)")

    def __call__(self, module: nn.Module) -> Callable:
        """What an evaluation of ``module`` calls (prepared first if it was not)."""
        self.prepare(module)
        forward = self.forwards.get(id(module), (module, None))[1]
        return module if forward is None else forward.refresh()

    def describe(self) -> str:
        """graph.txt's words: what an evaluation runs (nothing for auto off CUDA)."""
        refused = [f.refused for _, f in self.forwards.values() if f is not None and f.refused]
        if self.why_not is not None:  # auto off CUDA is fastpipe's plain evaluation: nothing to say
            quiet = self.why_not.startswith("train.eval_fold=auto")
            return "" if quiet else f"evaluates the model as it is ({self.why_not})"
        if refused:
            return f"evaluates the model as it is (train.eval_fold's copy failed its check: {refused[0]})"
        return f"evaluates {self.summary}" if self.summary else "evaluates the model as it is"
