"""``train.*``: the training run's length, batch, learning-rate scaling, clipping, EMA, evaluation and checkpoints."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from fastpipe.config._checks import auto_or_bool, auto_or_int, one_of
from fastpipe.errors import ConfigError

# train.lr_find_rule's choices (fastpipe/finders/lr_curve.py reads the rate each names off the curve)
LR_FIND_RULES = ("valley", "steepest", "min_div10", "diverged_div10", "trial")


@dataclass
class TrainConfig:
    epochs: int = 3  # passes over the training split (max_steps may stop the run sooner)
    max_steps: Optional[int] = None  # cap on optimizer steps over the whole run; null = epochs decide
    # Samples per process per micro-batch, or auto: the largest that fits in device memory (or, with
    # batch_size_goal=throughput, the fastest of those). auto tries the real step before training
    # (fastpipe/finders/batch_size.py; on a CPU up to batch_size_max, which is then the answer for memory).
    batch_size: Any = 64
    batch_size_goal: str = "memory"  # auto: memory (the largest that fits) or throughput (best samples/s)
    batch_size_max: Optional[int] = None  # auto's largest candidate; null = 4096 on a GPU, 128 on a CPU
    # auto's first candidate: it doubles from there while the step fits (halves while it does not), then
    # bisects between the last size that fitted and the first that did not; null = 256 on a GPU, 32 on a CPU.
    batch_size_start: Optional[int] = None
    # auto's sizes: 8 = multiples of 8 (1, 2, 4 below 8); pow2 = powers of two only (doubling and halving,
    # no bisection: fewer probes, an answer up to 2x below the largest size that fits).
    batch_size_round: Any = 8
    # auto's time budget: once the search has spent this many seconds, it stops doubling or bisecting and
    # takes the best size tried so far (halving until one fits is never cut short); null = no limit.
    batch_size_search_s: Optional[float] = 30.0
    # The learning rate follows the global batch (batch_size x grad_accum x processes): none = as
    # configured; linear = optimizer.lr x global / lr_reference_batch (Goyal et al. 2017); sqrt = x its
    # square root (often used with Adam). graph.txt shows the lr applied. A found rate (optimizer.lr=auto)
    # is not scaled: the range test measured it at this run's batch.
    lr_scaling: str = "none"
    lr_reference_batch: int = 256  # the global batch optimizer.lr was tuned for
    # optimizer.lr=auto's range test (docs/recipe.md, "Finding the learning rate"): before training, the
    # run's training step at rates rising exponentially from lr_find_min to lr_find_max over lr_find_steps
    # optimizer steps (or lr_find_steps_per_decade steps for each decade of the ramp, when set).
    lr_find_min: float = 1.0e-7
    lr_find_max: float = 10.0
    lr_find_steps: int = 100
    lr_find_steps_per_decade: Optional[int] = None
    # The test stops where the loss diverged: the median of its last lr_find_diverge_steps losses past
    # lr_find_diverge_ratio x that median's lowest value, or a non-finite loss.
    lr_find_diverge_ratio: float = 2.0
    lr_find_diverge_steps: int = 5
    # The seed of the test's batches and its throw-away model; null = the run's seed. A fixed value gives
    # every seed of a race or of report.repeats the same rate.
    lr_find_seed: Optional[int] = None
    # Which rate of the curve: valley (fastai's default: half-way down the longest descent), steepest (the
    # steepest descent per decade), min_div10 (a tenth of the rate at the lowest loss), diverged_div10 (a
    # tenth of the rate at which the loss diverged), trial (the rates of valley, steepest and min_div10,
    # each trained lr_find_trial_steps steps from the same start: the lowest loss at the end wins).
    lr_find_rule: str = "valley"
    lr_find_trial_steps: int = 50
    # Run the range test alone: its lr_search, lr_find.csv and lr_find.png, and no training (status ok).
    # A race of optimizer.lr=auto jobs (+sweep=lr) runs one such job for the whole race.
    lr_find_only: bool = False
    # A folder whose metrics.json holds a finished range test (a lr_find_only job's, or a run's that found
    # its rate) to reuse instead of running one: the same lr_find_* settings and batch size are required.
    lr_find_from: Optional[str] = None
    # Gradient clipping: the gradients' total L2 norm is scaled down to at most this (after fp16 loss
    # scaling is undone); null = off. The norm before clipping is logged at window edges.
    clip_grad_norm: Optional[float] = None
    # An exponential moving average of the weights (torch.optim.swa_utils.AveragedModel), updated after
    # every step: ema_t = decay * ema + (1 - decay) * weights; evaluated and checkpointed beside the
    # raw weights, and the run's held-out metrics are the average's. null = off.
    ema_decay: Optional[float] = None
    eval_every: Optional[int] = None  # also evaluate every N optimizer steps (besides each epoch's end)
    # Evaluate on the first N held-out batches only; null = the whole split. With train.target such an
    # evaluation only screens, as train.target_eval_samples does: one that reaches the target is
    # confirmed on the whole split at once, and only that one counts.
    eval_batches: Optional[int] = None
    # Held-out samples per process per evaluation batch, or auto: train.batch_size (the training step's
    # shapes: its autotuned convolutions are reused, and its memory is known to fit).
    eval_batch_size: Any = "auto"
    # Evaluate a torch.fx copy of the model whose Conv2d -> BatchNorm2d pairs are folded into one
    # convolution (on CUDA: those ending in a ReLU, with it and a residual add fused into one cuDNN
    # call), checked against the model at the first evaluation; a model fx cannot trace runs as it is.
    # auto = on CUDA (where it was measured to pay); true = also on the CPU; false = never.
    eval_fold: Any = "auto"
    # Read the held-out batches that are kept on the device (docs/time-to-target.md#evaluating-fast) in
    # a background thread from the first step on, so that no evaluation waits on the loader: auto = on
    # CUDA with data=default or data=mmap (not a pack DALI decodes); true = any loader, also on the CPU
    # (the thread takes cores from training there); false = kept after an evaluation's first pass only.
    eval_read_ahead: Any = "auto"
    # Train every epoch on the same first N batches of the training split (Lightning's overfit_batches),
    # and evaluate on them: a model that can learn drives the loss near zero (+debug=overfit); null = off.
    overfit_batches: Optional[int] = None
    # Time to target (docs/time-to-target.md): a value of the task's primary held-out metric, reached in
    # its direction (accuracy >= 0.95, an LM's loss <= 1.6). The run evaluates every eval_every steps
    # (required) and stops at the first evaluation that reaches it; metrics.json's target says when.
    target: Optional[float] = None
    # Those evaluations on N held-out samples only: class-balanced when the dataset exposes its labels
    # (a `targets` attribute or method), else random; drawn with the run's seed, the same at every
    # evaluation. A subset that reaches the target is confirmed at once on the whole split, and only
    # the confirmed evaluation counts.
    target_eval_samples: Optional[int] = None
    # A screen on that subset also ends as a miss once its samples so far fall further short of the target
    # than a subset reaching it would with this probability (Bernstein's bound, for a task whose metric has
    # both bounds; the subset is read in a seeded random order): a screen whose whole subset would reach
    # the target is missed with at most this probability. 0 = only once a hit is impossible (exact).
    target_screen_risk: float = 0.001
    # Stop cleanly once the training clock (from the first step; evaluations, checkpoints and
    # compilation included) passes this many seconds: a final evaluation, a checkpoint (to resume from)
    # and the results. Checked where the host syncs anyway (window edges, evaluations, epoch ends) and
    # agreed by every rank. null = no limit.
    time_budget_s: Optional[float] = None
    # MixUp / CutMix of each training batch on the device (torchvision.transforms.v2, Beta(alpha, alpha));
    # classification of images only (the task's loss takes the soft labels); both set = one of the two
    # per batch. null = off.
    mixup_alpha: Optional[float] = None
    cutmix_alpha: Optional[float] = None
    # Stop when the task's primary metric has not improved (by more than early_stop_min_delta, in its
    # direction) for this many evaluations in a row; null = never.
    early_stop_patience: Optional[int] = None
    early_stop_min_delta: float = 0.0
    # No weight decay on biases and normalisation weights (1-d parameters), as nanoGPT and torchtitan
    # do: auto = for AdamW/Adam only (decoupled decay); true / false for every optimizer.
    no_decay: Any = "auto"
    # Keep the trained weights: checkpoints/best.pt (the best evaluation by the task's primary metric)
    # and checkpoints/last.pt (the end of the run), for fastpipe.load and python -m fastpipe.evaluate.
    save_weights: bool = True
    grad_accum: int = 1  # micro-batches per optimizer step
    max_nonfinite_steps: int = 20  # stop after this many non-finite losses in a row
    checkpoint_every: Optional[int] = 0  # steps between checkpoints in <run>/checkpoints; 0 or null = off
    keep_checkpoints: int = 3  # the newest K checkpoints are kept
    # auto = the newest good checkpoint of this run folder (fix hydra.run.dir); a step-*.pt file or
    # a run folder; null = start fresh.
    resume: Optional[str] = None

    def __post_init__(self) -> None:
        auto_or_bool("train.no_decay", self.no_decay)
        auto_or_bool("train.eval_fold", self.eval_fold)
        auto_or_bool("train.eval_read_ahead", self.eval_read_ahead)
        auto_or_int("train.batch_size", self.batch_size, minimum=1)
        auto_or_int("train.eval_batch_size", self.eval_batch_size, minimum=1)
        one_of("train.batch_size_goal", self.batch_size_goal, ("memory", "throughput"))
        one_of("train.batch_size_round", self.batch_size_round, (8, "pow2"))
        one_of("train.lr_scaling", self.lr_scaling, ("none", "linear", "sqrt"))
        if self.batch_size_search_s is not None and not self.batch_size_search_s > 0:
            raise ConfigError(f"train.batch_size_search_s={self.batch_size_search_s:g} must be > 0 (seconds), or null "
                              "for no limit")
        self._check_lr_find()
        for key in ("batch_size_max", "batch_size_start", "lr_reference_batch"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be >= 1")
        if self.clip_grad_norm is not None and not self.clip_grad_norm > 0:
            raise ConfigError(f"train.clip_grad_norm={self.clip_grad_norm} must be > 0 (or null: no clipping)")
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ConfigError(f"train.ema_decay={self.ema_decay} must lie in (0, 1), e.g. 0.999 (or null: no EMA)")
        self._check_target()
        for key in ("eval_every", "early_stop_patience", "eval_batches", "overfit_batches"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be >= 1 (or null)")
        for key in ("epochs", "grad_accum", "max_nonfinite_steps", "keep_checkpoints"):
            if getattr(self, key) < 1:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError("train.max_steps must be >= 1 (or null for no cap)")
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise ConfigError("train.checkpoint_every must be >= 0 (steps; 0 or null = off)")
        if self.resume in ("", "null", "none", "off", "false"):
            self.resume = None

    def _check_lr_find(self) -> None:
        """optimizer.lr=auto's range test: a ramp that rises, long enough to smooth and trim."""
        one_of("train.lr_find_rule", self.lr_find_rule, LR_FIND_RULES)
        if not 0 < self.lr_find_min < self.lr_find_max:
            raise ConfigError(f"train.lr_find_min={self.lr_find_min:g} and train.lr_find_max={self.lr_find_max:g}: the "
                              "range test's ramp needs 0 < lr_find_min < lr_find_max (defaults 1e-7 and 10)")
        if self.lr_find_steps < 10:
            raise ConfigError(f"train.lr_find_steps={self.lr_find_steps} must be >= 10: the rules skip the ramp's "
                              "first tenth and last lr_find_diverge_steps steps (default 100)")
        if self.lr_find_steps_per_decade is not None and self.lr_find_steps_per_decade < 1:
            raise ConfigError(f"train.lr_find_steps_per_decade={self.lr_find_steps_per_decade} must be >= 1 (steps for "
                              "each decade of the ramp), or null to use train.lr_find_steps")
        if not self.lr_find_diverge_ratio > 1:  # nan too
            raise ConfigError(f"train.lr_find_diverge_ratio={self.lr_find_diverge_ratio} must be > 1: the loss has "
                              "diverged once its recent median passes this multiple of its lowest (default 2; inf: "
                              "only a non-finite loss stops the test)")
        if not 1 <= self.lr_find_diverge_steps <= self.lr_find_steps // 2:
            raise ConfigError(f"train.lr_find_diverge_steps={self.lr_find_diverge_steps} must be between 1 and half of "
                              f"train.lr_find_steps={self.lr_find_steps}: the median of that many losses tells a climb "
                              "from one bad batch (default 5)")
        if self.lr_find_trial_steps < 1:
            raise ConfigError(f"train.lr_find_trial_steps={self.lr_find_trial_steps} must be >= 1: the steps each "
                              "candidate rate of train.lr_find_rule=trial trains (default 50)")

    def _check_target(self) -> None:
        """train.target and its companions: what a time-to-target run needs."""
        if self.target is not None and not math.isfinite(self.target):  # nan compares false with every value
            raise ConfigError(f"train.target={self.target} is not a number a metric can reach: give a finite value "
                              "of the task's primary metric (e.g. train.target=0.9 for accuracy), or null for none")
        if self.target is not None and not self.eval_every:
            raise ConfigError(f"train.target={self.target:g} needs train.eval_every=N (the run checks the target "
                              "every N optimizer steps): add e.g. train.eval_every=50")
        if self.target_eval_samples is not None:
            if self.target is None:
                raise ConfigError(f"train.target_eval_samples={self.target_eval_samples} sizes the evaluations that "
                                  "check train.target, which is not set: add train.target=VALUE, or drop it")
            if self.target_eval_samples < 1:
                raise ConfigError(f"train.target_eval_samples={self.target_eval_samples} must be >= 1 (held-out "
                                  "samples), or null for the whole split")
        if not 0 <= self.target_screen_risk < 1:
            raise ConfigError(f"train.target_screen_risk={self.target_screen_risk} must be in [0, 1): the chance a "
                              "screen may miss a subset that reaches the target (default 0.001; 0: exact screens)")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ConfigError(f"train.time_budget_s={self.time_budget_s} must be > 0 (training-clock seconds), or "
                              "null for no limit")
        for key in ("mixup_alpha", "cutmix_alpha"):
            if getattr(self, key) is not None and not getattr(self, key) > 0:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be > 0 (the Beta distribution's alpha, "
                                  "e.g. 0.2 for MixUp, 1.0 for CutMix), or null: off")
