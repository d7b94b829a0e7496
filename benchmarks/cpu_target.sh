#!/usr/bin/env bash
# Time to target on the 2-core CPU, each sweep ranked twice: by time to the target (its own report) and
# by steady-state throughput (the same jobs, python -m fastpipe.report --objective throughput), and
# where the two rankings disagree.
#   1. image: the default task (TinyCNN on the built-in shapes, 2,400 images at 32 px) to held-out
#      accuracy 0.95 with the preset +sweep=target (batch 64/128 with lr_scaling=sqrt x lr 0.003/0.01
#      x label smoothing 0/0.1 x EMA off/0.99: 16 jobs), evaluated every 10 steps, at most 6 epochs;
#   2. lm: the byte-level LM (task=lm dataset=tokens model=gpt_tiny) to a held-out loss of 2.0 nats per
#      byte over batch 32/64 x lr 0.003/0.006 (4 jobs), checked every 100 steps on the first 1,024
#      held-out windows (confirmed on all 7,737), at most 1,500 steps (and 10 epochs).
# The datasets (shapes images, token files) are built once before the clocks start.
#   bash benchmarks/cpu_target.sh [image|lm|both] > benchmarks/results/cpu-target.log 2>&1
# Run it on an idle machine (uptime's load below 1): concurrent work slows every job, unevenly. On a
# shared machine OMP_NUM_THREADS=1 keeps each job's intra-op threads from spinning against the others'
# (several times faster there); the log's first line records it.
set -euo pipefail
which=${1:-both}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
export FASTPIPE_CACHE="$work/data-cache" TORCHINDUCTOR_CACHE_DIR="$work/inductor-cache"
echo "# $(date -u '+%F %T') UTC · $(nproc --all) CPU cores · $(python -c 'import torch; print("torch", torch.__version__)')" \
  "· fastpipe $(git rev-parse --short HEAD 2>/dev/null || echo '?') · load $(cut -d' ' -f1-3 /proc/loadavg) · work $work" \
  "· OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"

rankings() {  # the sweep folder: both rankings from the two reports' CSVs, and whether they agree
  python - "$1" <<'PY'
import csv, sys
from pathlib import Path
sweep = Path(sys.argv[1])
def rows(folder):
    with open(folder / "report.csv") as fh:
        return list(csv.DictReader(fh))
by_time, by_rate = rows(sweep), rows(sweep.with_name(sweep.name + "-throughput"))
label = lambda r: f"#{r['job']}"  # noqa: E731
time_order = [label(r) for r in by_time if r["target_reached"] == "True"]
rate_order = [label(r) for r in by_rate if r["throughput"]]
win_time = next((label(r) for r in by_time if r["best"] == "True"), None)
win_rate = next((label(r) for r in by_rate if r["best"] == "True"), None)
print(f"time-to-target ranking (reached only): {' '.join(time_order)}")
print(f"throughput ranking:                    {' '.join(rate_order)}")
same = [a == b for a, b in zip(time_order, [x for x in rate_order if x in time_order])]
print(f"winner by time to target: {win_time}; winner by throughput (parity rule): {win_rate}; "
      + ("the winners agree" if win_time == win_rate else "the winners DISAGREE")
      + f"; {sum(same)} of {len(same)} reached jobs hold the same place in both rankings")
rate = {label(r): r for r in by_rate}
if win_time and win_rate and win_time != win_rate:
    t, w = next(r for r in by_time if label(r) == win_time), next(r for r in by_time if label(r) == win_rate)
    tt = lambda r: f"{float(r['time_to_target_s']):.1f} s" if r["time_to_target_s"] else f"not reached in {float(r['target_seconds']):.1f} s"  # noqa: E731
    print(f"  {win_time}: {float(t['throughput']):,.1f} samples/s, target in {tt(t)}; "
          f"{win_rate}: {float(w['throughput']):,.1f} samples/s, target {tt(w)}")
PY
}

run_sweep() {  # a name, then the sweep's arguments
  local name=$1 start end
  shift
  rm -rf "${work:?}/$name" "${work:?}/$name-throughput"
  echo "## $name: python -m fastpipe -m $*"
  start=$(date +%s.%N)
  python -m fastpipe -m "$@" runtime.progress=false "hydra.sweep.dir=$work/$name" > "$work/$name.log" 2>&1
  end=$(date +%s.%N)
  echo "$name wall_s=$(echo "$end - $start" | bc) load_after=$(cut -d' ' -f1-3 /proc/loadavg)"
  cat "$work/$name/report.md"
  printf '\n### the baseline job'"'"'s run summary (job 0)\n\n'
  awk '/fastpipe run summary/{f=1} f{print} /model FLOPs/{if(f){exit}}' "$work/$name.log"
  cp -r "$work/$name" "$work/$name-throughput"
  python -m fastpipe.report "$work/$name-throughput" --objective throughput --quiet > /dev/null
  printf '\n### the same jobs ranked by throughput\n\n'
  grep -E '^- (best|parity)|^\|' "$work/$name-throughput/report.md"
  printf '\n### the two rankings\n\n'
  rankings "$work/$name"
  echo
}

if [[ $which == image || $which == both ]]; then
  python -m fastpipe train.max_steps=1 measure.warmup_steps=1 runtime.progress=false "hydra.run.dir=$work/prime-image" \
    > "$work/prime-image.log" 2>&1
  run_sweep image +sweep=target train.target=0.95 train.eval_every=10 train.epochs=6
fi
if [[ $which == lm || $which == both ]]; then
  python -m fastpipe task=lm dataset=tokens model=gpt_tiny train.max_steps=1 measure.warmup_steps=1 \
    runtime.progress=false "hydra.run.dir=$work/prime-lm" > "$work/prime-lm.log" 2>&1
  run_sweep lm task=lm dataset=tokens model=gpt_tiny report.objective=time_to_target train.target=2.0 \
    train.eval_every=100 train.target_eval_samples=1024 train.epochs=10 train.max_steps=1500 \
    train.batch_size=32,64 optimizer.lr=0.003,0.006
fi
