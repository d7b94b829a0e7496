#!/usr/bin/env bash
# The README's set-up promise on a 2-core CPU: `python -m fastpipe` (default config, first-time
# dataset generation included: a fresh cache) for seeds 0-3; wall time and the held-out metrics.
# Seed 0's whole output (graph and summary) is kept: the README quotes it.
#   D=$(bash benchmarks/lib/result_dir.sh default-run cpu) && bash benchmarks/default_run.sh > "$D/default-run.log" 2>&1
set -u
cache=$(mktemp -d)
echo "# $(date -u +%F) $(nproc) CPU cores, fastpipe $(git rev-parse --short HEAD 2>/dev/null || echo "?"), $(python -c 'import torch; print("torch", torch.__version__)')"
for seed in 0 1 2 3; do
  rm -rf "$cache"/*
  start=$(date +%s.%N)
  if [ "$seed" = 0 ]; then
    FASTPIPE_CACHE=$cache python -m fastpipe seed=$seed runtime.progress=false hydra.run.dir="$cache/run-$seed"
  else
    FASTPIPE_CACHE=$cache python -m fastpipe seed=$seed runtime.progress=false hydra.run.dir="$cache/run-$seed" \
      | grep -E "^  (throughput|held-out) "
  fi
  echo "seed=$seed wall_s=$(echo "$(date +%s.%N) - $start" | bc)"
done
rm -rf "$cache"
