#!/usr/bin/env bash
# The CPU sweep behind README's "Sweeps and the report" example: the seeds' ladder on the default
# model and dataset (TinyCNN, shapes 2,400 images at 32 px, 3 epochs), one job per ladder step.
# Ran 2026-11-29 on a shared 2-core VM (no GPU) as:
#   python -m fastpipe -m +sweep=ladder runtime.progress=false hydra.sweep.dir=/tmp/sweeptry/bench/ladder
# then `python -m fastpipe.report` rebuilt the report with the final report code. The sweep folder's
# report.md, report.csv, report.png and best.yaml are copied here (the job folders are not).
set -euo pipefail
out=${1:-outputs/multirun/cpu_ladder}
python -m fastpipe -m +sweep=ladder runtime.progress=false "hydra.sweep.dir=$out"
cp "$out"/report.md "$out"/report.csv "$out"/report.png "$out"/best.yaml "$(dirname "$0")"/
