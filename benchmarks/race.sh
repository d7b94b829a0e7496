#!/usr/bin/env bash
# Does hydra/sweeper=race name the same winner (or the same tie set) from two seed bases, and what does
# it cost against report.repeats=5 on every job and against one run per job? From the repository root:
#   bash benchmarks/race.sh --machine cpu           # the 2-core VM, on an idle machine (load below 1)
#   SMOKE=1 bash benchmarks/race.sh --machine cpu   # tiny: checks the commands, not the answer
#   bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/race.sh --machine h200
# The default task (TinyCNN on the built-in shapes, 2,400 images at 32 px) to held-out accuracy 0.95,
# evaluated every 10 steps, at most 600 steps, four learning rates: two close (0.003, 0.01) and two far
# too low to reach the target within 600 steps (1e-05, 3e-06). Four sweeps of the same four jobs, one
# after another, each timed from outside (wall seconds of the whole `python -m fastpipe -m` process):
#   race-0 and race-100: hydra/sweeper=race from seed=0 and seed=100 (its defaults: at most 10 rounds, cap 2x);
#   repeats-5: a grid with report.repeats=5 (seeds 0-4 for every job: the paired test of the report);
#   grid-1: a grid with one run per job (the ranking the report calls untested).
# Each sweep's report.md follows its wall time; the summary last: the winners or tie sets and the races'
# wall time as a share of the repeats grid's (goal: at most 60 %). WORK=DIR keeps the sweep folders.
# --machine h200 (one H100 or H200): two ResNet-50 jobs on the 51,200-image shapes set at 224 px (compile=off
# at batch 256 and 512, amp, data=mmap, SGD lr 0.1 scaled linearly, to 90 % held-out accuracy every 25 steps
# on 2,048 class-balanced samples), raced with the race's default settings from seed base SEED (default 0)
# for as long as DEADLINE seconds allow (default 500; the data and its pack are built by the first job into
# /tmp/fp-ttt/fpcache if absent). The race runs with sweep.resume=true in /tmp/fp-ttt/race-SEED, so a race
# cut off by the deadline (SIGTERM: its report says it has no verdict yet) goes on where it stopped when the
# same command runs again on the same warm machine. $OUT gets race-h200-SEED.log (appended), race.json,
# report.md and race-SEED.tgz (every round's records and logs, no checkpoint: the report can be rewritten).
set -euo pipefail
case ${1:-} in
  --machine) machine=${2:-} ;;
  --machine=*) machine=${1#--machine=} ;;
  *) machine="" ;;
esac
h200() {  # one call: as many rounds of the two-job race as the deadline allows
  local work=${WORK:-/tmp/fp-ttt} out=${OUT:-/tmp/out} deadline=${DEADLINE:-500} seed=${SEED:-0}
  local log="$out/race-h200-$seed.log"
  mkdir -p "$out"
  export FASTPIPE_CACHE="$work/fpcache" TORCHINDUCTOR_CACHE_DIR="$work/inductor-race" PYTHONUNBUFFERED=1
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # the machine's rule
  echo "# $(date -u '+%F %T') UTC · $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) · fastpipe" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo '?') · seed base $seed · deadline ${deadline} s" | tee -a "$log"
  timeout -s TERM -k 60 "$deadline" python3 -m fastpipe -m hydra/sweeper=race compile=off train.batch_size=256,512 \
    dataset=shapes "dataset.source_size=[500,375]" dataset.num_images=51200 dataset.image_size=224 \
    dataset.augment=true model=resnet50 +model.zero_init_residual=true precision=amp data=mmap optimizer=sgd \
    optimizer.lr=0.1 train.lr_scaling=linear train.lr_reference_batch=256 lr_schedule.warmup_steps=10 \
    train.epochs=3 measure.warmup_steps=10 measure.window=10 report.objective=time_to_target train.target=0.90 \
    train.eval_every=25 train.target_eval_samples=2048 runtime.progress=false seed="$seed" sweep.resume=true \
    "hydra.sweep.dir=$work/race-$seed" >> "$log" 2>&1 && code=0 || code=$?
  echo "exit $code after $SECONDS s" | tee -a "$log"
  [[ -f $work/race-$seed/report.md ]] || python3 -m fastpipe.report "$work/race-$seed" --quiet >> "$log" 2>&1 || true
  cp "$work/race-$seed/race.json" "$out/race-$seed.json" 2>/dev/null || true
  cp "$work/race-$seed/report.md" "$out/report-$seed.md" 2>/dev/null || true
  tar -C "$work" -czf "$out/race-$seed.tgz" --exclude='*.pt' --exclude='tb' --exclude='*.png' "race-$seed" || true
  cat "$out/report-$seed.md" 2>/dev/null || tail -40 "$log"
}
[[ $machine == h200 ]] && { h200; exit 0; }
[[ $machine == cpu ]] || { echo "usage: race.sh --machine cpu|h200" >&2; exit 2; }
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
export FASTPIPE_CACHE="$work/data-cache" TORCHINDUCTOR_CACHE_DIR="$work/inductor-cache"
JOBS=(optimizer.lr=0.003,0.01,0.00001,0.000003)
DATA=(runtime.progress=false)
RUN=(report.objective=time_to_target train.target=0.95 train.eval_every=10 train.epochs=30 train.max_steps=600)
RACE=(hydra/sweeper=race)
if [[ ${SMOKE:-0} == 1 ]]; then
  DATA=(dataset.num_images=240 dataset.image_size=16 train.batch_size=16 measure.warmup_steps=2 measure.window=3
        data.num_workers=0 runtime.progress=false)
  RUN=(report.objective=time_to_target train.target=0.5 train.eval_every=4 train.max_steps=16)
  RACE=(hydra/sweeper=race hydra.sweeper.min_rounds=2 hydra.sweeper.max_rounds=5 hydra.sweeper.alpha=0.4)
fi
RUN+=("${DATA[@]}")
echo "# $(date -u '+%F %T') UTC · $(nproc --all) CPU cores · $(python -c 'import torch; print("torch", torch.__version__)')" \
  "· fastpipe $(git rev-parse --short HEAD 2>/dev/null || echo '?') · load $(cut -d' ' -f1-3 /proc/loadavg) · work $work"
python -m fastpipe "${DATA[@]}" train.max_steps=1 measure.warmup_steps=1 "hydra.run.dir=$work/prime" \
  > "$work/prime.log" 2>&1  # the dataset, generated once before any clock

sweep() {  # a name, then the sweep's own arguments: its wall time and report
  local name=$1 start end
  shift
  rm -rf "${work:?}/$name"
  echo "## $name: python -m fastpipe -m $* ${RUN[*]}"
  start=$(date +%s.%N)
  python -m fastpipe -m "$@" "${RUN[@]}" "hydra.sweep.dir=$work/$name" > "$work/$name.log" 2>&1
  end=$(date +%s.%N)
  echo "$name wall_s=$(python -c "print(round($end - $start, 1))") load_after=$(cut -d' ' -f1-3 /proc/loadavg)" \
    | tee -a "$work/walls.txt"
  cat "$work/$name/report.md"
  echo
}

sweep race-0 "${RACE[@]}" "${JOBS[@]}" seed=0
sweep race-100 "${RACE[@]}" "${JOBS[@]}" seed=100
sweep repeats-5 "${JOBS[@]}" report.repeats=5
sweep grid-1 "${JOBS[@]}"

echo "## summary"
python - "$work" <<'EOF'
import re
import sys
from pathlib import Path

work = Path(sys.argv[1])
walls = dict(re.findall(r"^(\S+) wall_s=([\d.]+)", (work / "walls.txt").read_text(), re.M))
for name in ("race-0", "race-100", "repeats-5", "grid-1"):
    lines = (work / name / "report.md").read_text().splitlines()
    verdict = [x for x in lines if x.startswith(("- winner:", "- tie:", "- best:", "- noise:"))]
    print(f"{name}: {float(walls[name]):,.0f} s wall; " + " | ".join(v[2:] for v in verdict))
for race in ("race-0", "race-100"):
    print(f"{race} / repeats-5 wall time: {float(walls[race]) / float(walls['repeats-5']):.0%} (goal <= 60 %)")
EOF
