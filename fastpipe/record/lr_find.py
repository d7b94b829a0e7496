"""optimizer.lr=auto's files in the run folder: ``lr_find.csv`` (each step of the range test) and
``lr_find.png`` (the smoothed loss against the learning rate on a log axis, the suggestion and the point
where the loss diverged marked), from metrics.json's ``lr_search``."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Optional, Sequence

CSV, PNG = "lr_find.csv", "lr_find.png"
DPI = 110


def write_csv(path: Path, search: dict, raw: Optional[Sequence[float]] = None) -> None:
    """One row per step of the test: ``step, lr, loss`` (as measured, when ``raw`` is given), ``smoothed_loss``."""
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["step", "lr", "loss", "smoothed_loss"])
        for step, (lr, smoothed) in enumerate(search["curve"]):
            out.writerow([step, f"{lr:.6g}", "" if raw is None else f"{raw[step]:.6g}", f"{smoothed:.6g}"])


def figure(search: dict, title: str = ""):
    """The lr_find.png figure."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    if search["curve"]:
        lrs, losses = zip(*search["curve"])
        ax.plot(lrs, losses, color="tab:blue", label="smoothed training loss")
    ax.set_xscale("log")
    ax.axvline(search["suggestion"], color="tab:green", linestyle="--",
               label=f"{search['rule']}: {search['suggestion']:.3g}")
    used = search["suggestion"] * search["factor"]
    if search["factor"] != 1:
        ax.axvline(used, color="tab:olive", linestyle=":", label=f"x {search['factor']:g} = {used:.3g} (trained at)")
    if search["diverged_at"] is not None:
        ax.axvline(search["diverged_at"], color="tab:red", linestyle=":",
                   label=f"stopped at {search['diverged_at']:.3g} (diverged)")
    ax.set(xlabel="learning rate", ylabel="training loss (smoothed)")
    ax.set_title(title or f"range test: {search['steps']} steps from {search['min']:g} to {search['max']:g}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write(run_dir: Path, search: dict, raw: Optional[Sequence[float]] = None) -> None:
    """lr_find.csv and lr_find.png in ``run_dir``."""
    import matplotlib.pyplot as plt

    write_csv(Path(run_dir) / CSV, search, raw)
    fig = figure(search)
    fig.savefig(Path(run_dir) / PNG, dpi=DPI)
    plt.close(fig)
