"""Models for tests, named by ``model._target_=fault_models.X`` (tests/support is on the import path).

Each wraps the built-in TinyCNN and misbehaves on purpose: a NaN loss after some steps, a slow
step or one held until a file goes (so a test can signal or kill a process mid-training), an
out-of-memory error.
"""
from __future__ import annotations

import os
import signal
import time

import torch

from fastpipe.models import TinyCNN


class NaNAfter(TinyCNN):
    """TinyCNN whose training forward returns NaN logits from call ``after + 1`` on."""

    def __init__(self, num_classes: int = 10, after: int = 5) -> None:
        super().__init__(num_classes)
        self.after, self.calls = after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if self.training:
            self.calls += 1
            if self.calls > self.after:
                return out * float("nan")
        return out


class Slow(TinyCNN):
    """TinyCNN that sleeps ``sleep_s`` per training forward: a long run that costs no CPU."""

    def __init__(self, num_classes: int = 10, sleep_s: float = 0.2) -> None:
        super().__init__(num_classes)
        self.sleep_s = sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            time.sleep(self.sleep_s)
        return super().forward(x)


class Held(TinyCNN):
    """TinyCNN whose training forwards after the first ``after`` wait while the file ``hold`` exists and the
    process has had no stop signal: a run that stays in the middle of training for as long as a test needs,
    on any machine load, and goes on to the step's end (where it checkpoints) once SIGTERM or SIGUSR1 came."""

    MAX_HOLD_S = 300.0  # a test that fails before removing the file leaves no process waiting forever

    def __init__(self, num_classes: int = 10, hold: str = "", after: int = 6) -> None:
        super().__init__(num_classes)
        self.hold, self.after, self.calls = hold, after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from fastpipe import signals

        if self.training:
            self.calls += 1
            give_up = time.monotonic() + self.MAX_HOLD_S
            while (self.calls > self.after and os.path.exists(self.hold) and signals.received() is None
                   and time.monotonic() < give_up):
                time.sleep(0.05)
        return super().forward(x)


class SignalsAt(TinyCNN):
    """TinyCNN that sends its own process ``sig`` (SIGTERM, what Slurm sends) at training forward
    ``after + 1``: an in-process run stopped mid-training at a known step."""

    def __init__(self, num_classes: int = 10, after: int = 6, sig: str = "SIGTERM") -> None:
        super().__init__(num_classes)
        self.after, self.calls, self.sig = after, 0, signal.Signals[sig]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            if self.calls == self.after + 1:
                os.kill(os.getpid(), self.sig)
        return super().forward(x)


class OutOfMemoryNet(TinyCNN):
    """TinyCNN whose forward raises the error a CUDA allocation failure raises."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)")


class TabularNet(torch.nn.Module):
    """A linear classifier of 4 features, for test datasets of small vectors."""

    def __init__(self, num_classes: int = 2) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class KilledAt(TinyCNN):
    """TinyCNN whose process is SIGKILLed (as the out-of-memory killer does) at training forward ``after + 1``;
    with ``wait_for`` (a trackers.json), once that file names an MLflow run: a tracker run left behind.
    ``mode`` sets both for a sweep's one list: ``fast`` (never killed), ``slow`` (never killed, 300 ms a
    training forward: a throughput so far below fast's that one run each names a winner even when other load
    makes fast's step times spread tenfold), ``killed``, or ``broken`` (raises at its third training forward,
    a bug: a failed run that kills no process, for jobs trained in the test's own)."""

    MODES = {"fast": (10 ** 9, 0.0), "slow": (10 ** 9, 0.3), "killed": (2, 0.0), "broken": (2, 0.0)}

    def __init__(self, num_classes: int = 10, after: int = 3, wait_for: str = "", mode: str = "") -> None:
        super().__init__(num_classes)
        after, self.sleep_s = self.MODES[mode] if mode else (after, 0.0)
        self.after, self.calls, self.wait_for, self.broken = after, 0, wait_for, mode == "broken"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            time.sleep(self.sleep_s)
            if self.broken and self.calls > self.after:
                raise RuntimeError("fault_models.KilledAt: a bug in the model's forward")
            if self.calls > self.after:
                import json
                import os
                import signal
                from pathlib import Path

                deadline = time.time() + 120
                while self.wait_for and time.time() < deadline:
                    try:
                        if json.loads(Path(self.wait_for).read_text()).get("mlflow", {}).get("run_id"):
                            break
                    except (OSError, ValueError):
                        pass
                    time.sleep(0.1)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().forward(x)


class CrashesInForward(TinyCNN):
    """TinyCNN whose forward has a bug: an error fastpipe cannot know the cause of."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a bug in the project's forward")


class ReturnsTuple(TinyCNN):
    """TinyCNN that returns (logits, features): not what task=classification takes."""

    def forward(self, x: torch.Tensor):
        return super().forward(x), x


class UnusedHead(TinyCNN):
    """TinyCNN with a head its forward never uses: DDP by default fails at its second step."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__(num_classes)
        self.aux = torch.nn.Linear(4, 4)


class LingersAtExit:
    """A project callback whose ``on_end`` leaves a non-daemon thread sleeping ``seconds``: Python would
    wait for it at exit (as it waits for a tracker's uploader or a pool's workers that hang)."""

    def __init__(self, seconds: float = 120.0) -> None:
        self.seconds = seconds

    def on_end(self, run, record) -> None:
        import threading

        threading.Thread(target=time.sleep, args=(self.seconds,), name="lingers", daemon=False).start()
