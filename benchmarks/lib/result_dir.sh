#!/usr/bin/env bash
# The folder a result goes to, created: benchmarks/results/QUESTION/MACHINE-DATE-COMMIT (the naming rule
# of benchmarks/README.md: today's date, UTC, and this checkout's HEAD). From the repository root, e.g.
#   D=$(bash benchmarks/lib/result_dir.sh halving cpu) && bash benchmarks/halving.sh > "$D/halving.log" 2>&1
set -euo pipefail
usage="usage: result_dir.sh QUESTION MACHINE (cpu, h200, h200x2, ...)"
question=${1:?$usage}
machine=${2:?$usage}
dir="benchmarks/results/$question/$machine-$(date -u +%F)-$(git rev-parse --short=7 HEAD)"
mkdir -p "$dir"
echo "$dir"
