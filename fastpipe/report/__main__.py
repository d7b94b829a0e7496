"""``python -m fastpipe.report DIR [--save-best PATH]``: (re)write a sweep folder's report.

The settings default to the sweep's own (``report.*`` in DIR/multirun.yaml); the flags override
them (``--objective throughput`` ranks a time-to-target sweep's jobs by throughput instead). Exit code 0, or 2 with one line naming the problem.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from fastpipe.config.report import AGGREGATES, OBJECTIVES
from fastpipe.errors import EXIT_CODE, FastpipeError


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m fastpipe.report",
        description="Write report.md, report.csv, report.png, hparams/ and best.yaml into a sweep folder.")
    parser.add_argument("sweep_dir", type=Path, help="the sweep folder, e.g. outputs/multirun/DATE/TIME")
    parser.add_argument("--save-best", type=Path, metavar="PATH",
                        help="also write the winner as a Hydra experiment config, e.g. conf/experiment/NAME.yaml")
    parser.add_argument("--baseline", metavar="SPEC",
                        help='the baseline job: overrides ("precision=amp,compile=off") or a job number; '
                             "default: the sweep's report.baseline, else the first value of every swept key")
    parser.add_argument("--parity-tol", type=float, metavar="TOL",
                        help="how much worse than the baseline's the primary metric may be (absolute, in its units); "
                             "default: the sweep's report.parity_tol")
    parser.add_argument("--objective", choices=OBJECTIVES,
                        help="what ranks the jobs and picks the winner; default: the sweep's report.objective")
    parser.add_argument("--target-clock", choices=("training", "end_to_end"),
                        help="time_to_target's clock; default: the sweep's report.target_clock")
    parser.add_argument("--force", action="store_true",
                        help="with --save-best: write the leader even when the measurements do not separate it from "
                             "the others (a tie, an unstable throughput), with a comment saying so")
    parser.add_argument("--max-spread", type=float, metavar="S",
                        help="the widest (max - min) / median of a job's repeated throughputs that still ranks; "
                             "default: the sweep's report.max_spread")
    parser.add_argument("--aggregate", choices=AGGREGATES,
                        help="how several runs' times to target make one (median, or MLPerf's olympic mean); "
                             "default: the sweep's report.aggregate")
    parser.add_argument("--quiet", action="store_true", help="do not print report.md")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit code."""
    from fastpipe.report.publish import write_report
    from fastpipe.report.sweep_folder import load_spec
    from fastpipe.report.winner import experiment_hint

    args = parse_args(argv)
    try:
        spec = load_spec(args.sweep_dir) if args.sweep_dir.is_dir() else None
        if spec is not None and args.baseline is not None:
            spec.baseline = args.baseline
        if spec is not None and args.parity_tol is not None:
            if not args.parity_tol >= 0.0:
                raise FastpipeError(f"--parity-tol={args.parity_tol} must be >= 0 (in the primary metric's units)")
            spec.parity_tol = args.parity_tol
        if spec is not None:
            spec.objective = args.objective or spec.objective
            spec.target_clock = args.target_clock or spec.target_clock
            spec.aggregate = args.aggregate or spec.aggregate
            if args.max_spread is not None:
                if not args.max_spread > 0.0:
                    raise FastpipeError(f"--max-spread={args.max_spread} must be > 0 (e.g. 0.10)")
                spec.max_spread = args.max_spread
        if args.force and args.save_best is None:
            raise FastpipeError("--force goes with --save-best PATH (it writes a leader that is not a separated winner)")
        result = write_report(args.sweep_dir, spec, save_best=args.save_best, force=args.force)
    except FastpipeError as exc:
        print(f"fastpipe.report: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CODE
    if not args.quiet:
        print((args.sweep_dir / "report.md").read_text(), end="")
    print(f"wrote report.md, report.csv, report.png, hparams/{', best.yaml' if result.best else ''} "
          f"in {args.sweep_dir}")
    if args.save_best is not None:
        saved = result.best or result.candidate
        what = "the winner" if result.best is not None else "the leader, not a separated winner,"
        print(f"saved {what} (job {saved['job']}) to {args.save_best}; run it: {experiment_hint(args.save_best, args.sweep_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
