"""A run folder's artefacts besides metrics.json: graph.txt, TensorBoard scalars and loss.png."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, Optional

from fastpipe.record import results

LOSS_DPI = 110


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

    def write_metrics(self, record: dict) -> None:
        if self.enabled:
            results.write(self.run_dir, record)

    def plot_loss(self, history, title: str) -> None:
        """loss.png: training loss at each measurement window edge."""
        if not self.enabled or not history:
            return
        import matplotlib.pyplot as plt

        fig = loss_figure(history, title)
        fig.savefig(self.run_dir / "loss.png", dpi=LOSS_DPI)
        plt.close(fig)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def loss_figure(history, title: str):
    """The loss.png figure: loss against step, titled by the run's choices, wrapped to the figure's width
    (ten groups' choices are twice as long as one line)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps, losses = zip(*history)
    ax.plot(steps, losses, marker=".")
    ax.set(xlabel="optimizer step", ylabel="training loss")
    ax.set_title(textwrap.fill(title, width=75), fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
