#!/usr/bin/env bash
# The CPU sweep behind the README's "Sweeps" example: the seeds' ladder on the default
# model and dataset (TinyCNN, shapes 2,400 images at 32 px, 3 epochs), one job per ladder step.
# Ran 2026-11-29 on the 2-core VM (no GPU), shapes generator v2, as:
#   bash benchmarks/cpu_sweep/run.sh /tmp/ladder2
# The sweep folder's
# report.md, report.csv, report.png and best.yaml are copied here (the job folders are not).
set -euo pipefail
out=${1:-outputs/multirun/cpu_ladder}
python -m fastpipe -m +sweep=ladder runtime.progress=false "hydra.sweep.dir=$out"
cp "$out"/report.md "$out"/report.csv "$out"/report.png "$out"/best.yaml "$(dirname "$0")"/
