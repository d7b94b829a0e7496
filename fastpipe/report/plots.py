"""report.png: throughput of every job as a bar, the speed-up written on it, failed jobs marked; with a
target (train.target), a second panel: each job's primary held-out metric against training seconds."""
from __future__ import annotations

from pathlib import Path

from fastpipe.report.sweep import SweepResult

COLOURS = {"best": "#2ca02c", "baseline": "#7f7f7f", "ok": "#1f77b4", "parity": "#ff7f0e", "failed": "#d62728",
           "pruned": "#c5b0d5"}


def _label(r: dict, columns) -> str:
    return f"#{r['job']} " + (" ".join(f"{k}={r['swept'][k]}" for k in columns) or "")


def write_plot(result: SweepResult, path: Path) -> None:
    """Horizontal bars, fastest on top; a job without a throughput gets a hatched stub and its status."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    rows = result.rows
    top = max([r["throughput"] for r in rows if r["throughput"] is not None] or [1.0])
    curves = any(r.get("curve") for r in rows)
    height = 1.2 + 0.45 * len(rows)
    if curves:
        fig, (ax, panel) = plt.subplots(2, 1, figsize=(9, height + 4.0), height_ratios=[height, 4.0])
        target_panel(panel, result)
    else:
        fig, ax = plt.subplots(figsize=(9, height))
    for y, r in enumerate(rows):
        if r["throughput"] is None:  # failed / missing / unmeasured: a stub bar and the reason
            ax.barh(y, top * 0.02, color="white", edgecolor=COLOURS["failed"], hatch="///")
            ax.text(top * 0.03, y, f"{r['status'].upper()}: {str(r['reason'])[:70]}", va="center",
                    fontsize=8, color=COLOURS["failed"])
            continue
        kind = ("best" if r["best"] else "baseline" if r["baseline"] else "pruned" if r["status"] == "pruned" else
                "parity" if r["parity"] == "FAIL" else "failed" if r["status"] != "ok" else "ok")
        err = None
        if r["throughput_min"] is not None and r["repeats"] > 1:  # min..max over the repeats
            err = [[r["throughput"] - r["throughput_min"]], [r["throughput_max"] - r["throughput"]]]
        ax.barh(y, r["throughput"], color=COLOURS[kind], xerr=err, capsize=3,
                hatch=".." if kind == "pruned" else "//" if r["status"] != "ok" else None)
        speed = "n/a" if r["speedup"] is None else f"{r['speedup']:.2f}x" + (" sooner to target" if result.spec.objective == "time_to_target" else "")
        notes = ([f"pruned in round {r['round']} (probe)"] if kind == "pruned" else
                 [r["status"]] if r["status"] != "ok" else [])
        notes += [f"GPU {r['gpus']}"] if r.get("gpus") not in (None, "cpu") else []
        notes += ["baseline"] * r["baseline"] + ["best"] * r["best"] + [f"{r['metric']} FAIL"] * (r["parity"] == "FAIL")
        ax.text(r["throughput"], y, f" {speed}  {', '.join(notes)}", va="center", fontsize=9)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_label(r, result.columns) for r in rows], fontsize=8)
    ax.invert_yaxis()  # fastest on top, as in report.md
    ax.set_xlim(0, top * 1.45)  # room for the text after the longest bar
    ax.set_xlabel("throughput (samples/s, steady state)")
    ax.set_title(f"fastpipe sweep: {result.sweep_dir.name} (speed-up vs the baseline on each bar)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def target_panel(ax, result: SweepResult) -> None:
    """The primary metric of every whole-split evaluation against the training clock, one line per job,
    the target as a horizontal line, the winner thick and green, a job that missed the target dashed."""
    target = next((r for r in result.rows if r.get("target") is not None), None)
    for r in sorted(result.rows, key=lambda r: r["best"]):  # the winner drawn last, on top
        points = [(c["seconds"], c["value"]) for c in r.get("curve") or [] if not c.get("subset") and c["value"] is not None]
        if not points:
            continue
        xs, ys = zip(*points)
        style = dict(color=COLOURS["best"], linewidth=2.5, zorder=3) if r["best"] else dict(linewidth=1.0, alpha=0.8)
        ax.plot(xs, ys, marker=".", linestyle="-" if r.get("target_reached") else "--",
                label=_label(r, result.columns) + (" (best)" if r["best"] else ""), **style)
    if target is not None:
        ax.axhline(target["target"], color="black", linewidth=0.8, linestyle=":",
                   label=f"target {target['target_metric']} {target['target']:g}")
    ax.set_xlabel("training seconds (from the first step: compilation, evaluations, checkpoints included)")
    ax.set_ylabel(f"held-out {target['target_metric'] if target else 'metric'}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
