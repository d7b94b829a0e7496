#!/usr/bin/env bash
# Language modelling on a 2-core CPU: `python -m fastpipe task=lm dataset=tokens model=gpt_tiny` from a
# fresh cache (building the token files included); wall time, held-out loss and the corpus baselines.
#   bash benchmarks/cpu_lm.sh > benchmarks/results/cpu-lm-run.log 2>&1
set -u
cache=$(mktemp -d)
echo "# $(date -u +%F) $(nproc) CPU cores, $(python -c 'import sys, torch; print("torch", torch.__version__, "python", sys.version.split()[0])')"
start=$(date +%s.%N)
FASTPIPE_CACHE=$cache python -m fastpipe task=lm dataset=tokens model=gpt_tiny runtime.progress=false \
  hydra.run.dir="$cache/run"
echo "wall_s=$(echo "$(date +%s.%N) - $start" | bc)"
rm -rf "$cache"
