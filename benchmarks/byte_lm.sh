#!/usr/bin/env bash
# Language modelling on a 2-core CPU: `python -m fastpipe task=lm dataset=tokens model=gpt_tiny` from a
# fresh cache (building the token files included); wall time, held-out loss and the corpus baselines.
#   D=$(bash benchmarks/lib/result_dir.sh byte-lm cpu) && bash benchmarks/byte_lm.sh > "$D/byte-lm.log" 2>&1
set -u
cache=$(mktemp -d)
echo "# $(date -u +%F) $(nproc) CPU cores, fastpipe $(git rev-parse --short HEAD 2>/dev/null || echo "?"), $(python -c 'import sys, torch; print("torch", torch.__version__, "python", sys.version.split()[0])')"
start=$(date +%s.%N)
FASTPIPE_CACHE=$cache python -m fastpipe task=lm dataset=tokens model=gpt_tiny runtime.progress=false \
  hydra.run.dir="$cache/run"
echo "wall_s=$(echo "$(date +%s.%N) - $start" | bc)"
rm -rf "$cache"
