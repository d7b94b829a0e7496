"""One run's files: graph.txt, metrics.json, TensorBoard scalars and loss.png."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Dict, Optional

METRIC_KEYS = ("status", "reason", "choices", "overrides", "throughput", "step_time_ms", "epoch_time_s",
               "epoch_times_s", "warmup_s", "data_wait_frac", "peak_mem_gb", "peak_mem_kind", "gpu_util",
               "final_loss", "accuracy", "val_loss", "nonfinite_steps", "steps", "measured_steps",
               "compile_fallback", "flops_per_sample", "peak_tflops", "mfu", "checkpoint", "per_rank", "env",
               "warnings")


def empty_metrics(choices: Dict[str, str], overrides, env: dict) -> dict:
    """Every documented key, null until measured: a failed run still has a complete row."""
    metrics = {key: None for key in METRIC_KEYS}
    metrics.update(status="failed", choices=dict(choices), overrides=list(overrides), env=env, warnings=[])
    return metrics


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=2, default=str, allow_nan=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    return value


def read_metrics(run_dir: Path) -> Optional[dict]:
    path = Path(run_dir) / "metrics.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class RunRecorder:
    """Writes a run folder's artefacts; every method is a no-op on non-zero ranks."""

    def __init__(self, run_dir: Path, enabled: bool = True) -> None:
        self.run_dir, self.enabled, self._writer = Path(run_dir), enabled, None
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)

    @property
    def writer(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tb"))
        return self._writer

    def scalars(self, step: int, values: Dict[str, Optional[float]]) -> None:
        if not self.enabled:
            return
        for tag, value in values.items():
            if value is not None:
                self.writer.add_scalar(tag, value, step)

    def write_text(self, name: str, text: str) -> None:
        if self.enabled:
            (self.run_dir / name).write_text(text + "\n")

    def write_metrics(self, metrics: dict) -> None:
        if self.enabled:
            write_json_atomic(self.run_dir / "metrics.json", _finite_or_none(metrics))

    def plot_loss(self, history, title: str) -> None:
        """loss.png: training loss at each measurement window edge."""
        if not self.enabled or not history:
            return
        import matplotlib

        matplotlib.use("Agg")  # files only: never needs a display
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        steps, losses = zip(*history)
        ax.plot(steps, losses, marker=".")
        ax.set(xlabel="optimizer step", ylabel="training loss", title=title)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(self.run_dir / "loss.png", dpi=110)
        plt.close(fig)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _fmt(value, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def format_summary(m: dict) -> str:
    """The few lines printed at the end of a run."""
    if m.get("status") != "ok":
        return f"fastpipe run FAILED: {m.get('reason')}"
    st = m.get("step_time_ms") or {}
    acc = m.get("accuracy")
    lines = [
        "fastpipe run summary",
        f"  throughput   {_fmt(m['throughput'], ',.1f')} samples/s (steady state, {m['measured_steps']} steps)",
        f"  step time    median {_fmt(st.get('median'), '.2f', ' ms')}  p90 {_fmt(st.get('p90'), '.2f', ' ms')}",
        f"  warm-up      {_fmt(m['warmup_s'], '.2f', ' s')} (compilation included)   epoch {_fmt(m['epoch_time_s'], '.2f', ' s')}",
        f"  data-wait    {_fmt(None if m['data_wait_frac'] is None else 100 * m['data_wait_frac'], '.1f', ' %')}"
        f"   GPU util {_fmt(m['gpu_util'], '.0f', ' %')}   peak memory {_fmt(m['peak_mem_gb'], '.3f', ' GB')}",
        f"  accuracy     {_fmt(None if acc is None else 100 * acc, '.2f', ' %')} held-out   final loss {_fmt(m['final_loss'], '.4f')}",
    ]
    if m.get("flops_per_sample"):
        mfu = m.get("mfu")
        lines.append(f"  model FLOPs  {m['flops_per_sample'] / 1e9:.3f} GFLOP/sample (fwd+bwd)   MFU "
                     + (f"{100 * mfu:.1f} % of {m['peak_tflops']:.0f} TFLOP/s" if mfu is not None else "n/a (no peak for this device)"))
    lines += [f"  warning      {w}" for w in m.get("warnings") or []]
    return "\n".join(lines)
