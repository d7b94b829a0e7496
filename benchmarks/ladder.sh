#!/usr/bin/env bash
# The seeds' ladder (+sweep=ladder: baseline -> +loader -> +compile -> +amp, one job per step) on the
# default model and dataset (TinyCNN, shapes 2,400 images at 32 px, 3 epochs), on a CPU, each job
# REPEATS times (default 3: the report names a winner only where the repeats do not overlap). The sweep
# folder's report.md, report.csv, report.png and best.yaml (if a winner was named) are copied into DEST (default: a new
# benchmarks/results/ladder/cpu-DATE-COMMIT/; the job folders are not kept). From the repository root:
#   [REPEATS=N] bash benchmarks/ladder.sh [SWEEP_DIR] [DEST] [OVERRIDE...]
#   overrides need SWEEP_DIR and DEST before them ("" = the default), e.g.
#   bash benchmarks/ladder.sh /tmp/ladder "" train.epochs=10      (longer runs: steadier repeats)
set -euo pipefail
out=${1:-outputs/multirun/ladder}
dest=${2:-$(bash "$(dirname "$0")/lib/result_dir.sh" ladder cpu)}
python -m fastpipe -m +sweep=ladder runtime.progress=false "report.repeats=${REPEATS:-3}" "hydra.sweep.dir=$out" "${@:3}"
mkdir -p "$dest"
cp "$out"/report.md "$out"/report.csv "$out"/report.png "$dest"/
if [ -f "$out"/best.yaml ]; then cp "$out"/best.yaml "$dest"/; fi  # none when the report names no winner
