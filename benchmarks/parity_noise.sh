#!/usr/bin/env bash
# How much does the seed alone move a regression project's held-out metric, and so which report.parity_tol
# judges its sweeps by their settings rather than their seeds? From the repository root:
#   bash benchmarks/parity_noise.sh
# examples/friedman's recipe (+experiment=regression: 40 epochs) and a 5-epoch version of it, each over
# seeds 0-4 (identical jobs but the seed); the held-out mse of every job and its spread (max - min) last.
# The mse does not depend on the machine's load (only the timings do).
set -euo pipefail
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
echo "# $(date -u '+%F %T') UTC · $(nproc --all) CPU cores · $(python -c 'import torch; print("torch", torch.__version__)')" \
  "· fastpipe $(git rev-parse --short HEAD 2>/dev/null || echo '?') · work $work"
cd examples/friedman
for epochs in 40 5; do
  echo "## +experiment=regression train.epochs=$epochs seed=0,1,2,3,4"
  python -m fastpipe --config-dir conf -m +experiment=regression "train.epochs=$epochs" seed=0,1,2,3,4 \
    runtime.progress=false "hydra.sweep.dir=$work/epochs-$epochs" > "$work/epochs-$epochs.log" 2>&1
  python - "$work/epochs-$epochs" <<'EOF'
import json
import sys
from pathlib import Path

values = {}
for job in sorted(Path(sys.argv[1]).glob("[0-9]*/metrics.json"), key=lambda p: int(p.parent.name)):
    m = json.loads(job.read_text())
    values[job.parent.name] = m["primary_metric"]["value"]
print("held-out mse by job (seed = job):", ", ".join(f"{k}: {v:.4f}" for k, v in values.items()))
print(f"spread (max - min): {max(values.values()) - min(values.values()):.4f}")
EOF
done
