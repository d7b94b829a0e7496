#!/usr/bin/env bash
# Time to target: which configuration reaches a held-out target soonest, each sweep ranked twice: by
# time to the target (its own report) and by steady-state throughput (the same jobs, python -m
# fastpipe.report --objective throughput), and where the two rankings disagree. From the repository root:
#   bash benchmarks/time_to_target.sh --machine cpu [image|lm|both]
#   bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && \
#     bash benchmarks/time_to_target.sh --machine h200 PHASE
#
# --machine cpu (the 2-core VM; the datasets, shapes images and token files, are built once before the
# clocks start; WORK=DIR keeps the sweep folders):
#   image: the default task (TinyCNN on the built-in shapes, 2,400 images at 32 px) to held-out
#     accuracy 0.95 with the preset +sweep=target (batch 64/128 with lr_scaling=sqrt x lr 0.003/0.01
#     x label smoothing 0/0.1 x EMA off/0.99: 16 jobs), evaluated every 10 steps, at most 6 epochs;
#   lm: the byte-level LM (task=lm dataset=tokens model=gpt_tiny) to a held-out loss of 2.0 nats per
#     byte over batch 32/64 x lr 0.003/0.006 (4 jobs), checked every 100 steps on the first 1,024
#     held-out windows (confirmed on all 7,737), at most 1,500 steps (and 10 epochs).
#   Run it on an idle machine (uptime's load below 1): concurrent work slows every job, unevenly. On a
#   shared machine OMP_NUM_THREADS=1 keeps each job's intra-op threads from spinning against the
#   others'; the log's first line records it.
#
# --machine h200 (one H200, nvidia-h200): ResNet-50 at 224 px to 0.90 held-out accuracy on the
# 51,200-image shapes set (500x375 JPEGs, 40,978 train / 10,222 held out, random-resized-crop + flip),
# amp, data=mmap, SGD lr 0.1 at batch 256 scaled linearly (train.lr_scaling=linear), over compile
# off/default x batch 256/512 x resize schedule off/on (benchmarks/conf/resize: 160 px for the first
# 30 % of the steps, then 224): 8 jobs, once as a grid and once with hydra/sweeper=halving, each
# sweep with its own empty Inductor cache (both pay their compilations), their wall times side by
# side. Evaluations every 20 steps on the whole held-out split; at most 3 epochs per job. Phases, one
# `device` call each, back to back (the machine keeps /tmp while warm: the JPEG folder, the pack and
# the sweep folders carry over):
#   1 (<= 330 s) GPU facts; the JPEG folder and its data=mmap pack (one step of a tiny model).
#   2 (<= 540 s) the grid (8 jobs, report.objective=time_to_target), resumable (sweep.resume=true).
#   3 (<= 540 s) the rest of the grid if phase 2 was cut off, then the halving sweep, resumable.
#   4 (<= 300 s, only when phase 3 was cut off) the rest of the halving sweep; the comparison again.
# Expected device time (estimates, not measurements): phase 1 about 4 min, the grid about 8 min, the
# halving sweep about 8 min: 20 min with the machine's start. To fit 15 min, cut in this order:
#   RESIZE=off  (4 combinations: compile x batch; both sweeps take about half as long; phases 1-3)
#   HALVING=0   (the grid alone: no wall-time comparison, the ranking comparison stays)
# Each phase writes to $OUT/pN/: tables (report.md/csv of each sweep, both rankings, sweep-wall.txt,
# target.md: the comparison) and phaseN.tgz (logs, metrics.json, graph.txt, configs; no checkpoints,
# TensorBoard events or packs), refreshed every 30 s, and prints target.md last.
# SMOKE=1 runs a phase on this CPU with a tiny model and dataset: it checks the commands, not speed.
set -uo pipefail
B=benchmarks
USAGE="usage: time_to_target.sh --machine cpu [image|lm|both], or --machine h200 PHASE (1-4)"
case ${1:-} in
  --machine) machine=${2:-}; shift; shift || true ;;
  --machine=*) machine=${1#--machine=}; shift ;;
  *) machine="" ;;
esac

cpu() {  # the 2-core VM: each part's sweep in one go, its report and both rankings on stdout
  set -e
  which=${1:-both}
  work=${WORK:-$(mktemp -d)}
  mkdir -p "$work"
  export FASTPIPE_CACHE="$work/data-cache" TORCHINDUCTOR_CACHE_DIR="$work/inductor-cache"
  echo "# $(date -u '+%F %T') UTC · $(nproc --all) CPU cores · $(python -c 'import torch; print("torch", torch.__version__)')" \
    "· fastpipe $(git rev-parse --short HEAD 2>/dev/null || echo '?') · load $(cut -d' ' -f1-3 /proc/loadavg) · work $work" \
    "· OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"

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
    python $B/lib/rankings.py "$work/$name"
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
}

h200() {  # one H200: phases of at most one device call each, resumable sweeps, tables under $OUT/pN
  phase=${1:?usage: time_to_target.sh --machine h200 PHASE (1-4)}
  SMOKE=${SMOKE:-0}; RESIZE=${RESIZE:-off,on}; HALVING=${HALVING:-1}
  if [[ $SMOKE == 1 ]]; then W=${WORK:-/tmp/fp-target-smoke}; OUT=${OUT:-$W/out}; else W=${WORK:-/tmp}; OUT=${OUT:-/tmp/out}; fi
  P=$OUT/p$phase; LOGS=$W/logs-target; mkdir -p "$P" "$LOGS"
  export FASTPIPE_CACHE=$W/fpcache PYTHONUNBUFFERED=1
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # the machine's rule
  PY=${PY:-python3}
  PHASE_S=(0 330 540 540 300)
  DEADLINE=${DEADLINE:-${PHASE_S[$phase]}}
  [[ $SMOKE == 1 ]] && DEADLINE=${DEADLINE_SMOKE:-600}
  END=$(( $(date +%s) + DEADLINE - 20 ))  # 20 s kept for the last snapshot and the comparison
  left() { local s=$(( END - $(date +%s) )); echo $(( s > 5 ? s : 5 )); }
  echo "phase $phase: deadline ${DEADLINE} s (SMOKE=$SMOKE RESIZE=$RESIZE HALVING=$HALVING, work $W, out $P)"

  DATA=(dataset=shapes "dataset.source_size=[500,375]" dataset.num_images=51200 dataset.image_size=224
        dataset.augment=true)
  MODEL=(model=resnet50 +model.zero_init_residual=true)
  RECIPE=(precision=amp data=mmap data.verify=false optimizer=sgd optimizer.lr=0.1 train.lr_scaling=linear
          train.lr_reference_batch=256 lr_schedule.warmup_steps=10 train.epochs=3 measure.warmup_steps=10
          measure.window=10 runtime.progress=false)
  TARGET=(report.objective=time_to_target train.target=0.90 train.eval_every=20)
  GRID=(compile=off,default train.batch_size=256,512 +resize=$RESIZE)
  if [[ $SMOKE == 1 ]]; then
    DATA=(dataset=shapes "dataset.source_size=[48,36]" dataset.num_images=400 dataset.image_size=32 dataset.augment=true)
    MODEL=(model=tiny_cnn)
    RECIPE=(data=mmap data.verify=false optimizer=sgd optimizer.lr=0.1 train.lr_scaling=linear train.lr_reference_batch=16
            train.epochs=3 measure.warmup_steps=2 measure.window=2 runtime.progress=false device=cpu)
    TARGET=(report.objective=time_to_target train.target=0.35 train.eval_every=4)
    GRID=(compile=off train.batch_size=16,32 "+resize=off,smoke")  # CPU compiles take minutes: the commands only
  fi
  RUN=("$PY" $B/lib/runner.py --jsonl "$LOGS/runs.jsonl")

  # --- results: copied to $P after every step and every 30 s (a call cut off keeps what was measured)
  snapshot() {
    local f tmp=$P/.phase$phase.tgz.$BASHPID
    for f in grid halving; do
      [[ -f $W/$f/report.md ]] && cp "$W/$f/report.md" "$P/$f-report.md" && cp "$W/$f/report.csv" "$P/$f-report.csv"
      [[ -f $W/$f-throughput/report.md ]] && cp "$W/$f-throughput/report.md" "$P/$f-throughput-report.md"
    done
    [[ -f $LOGS/sweep-wall.txt ]] && cp "$LOGS/sweep-wall.txt" "$P/sweep-wall.txt"
    [[ -f $LOGS/target.md ]] && cp "$LOGS/target.md" "$P/target.md"
    tar czf "$tmp" --exclude=checkpoints --exclude=tb --exclude='*.pt' --exclude='*.fppack' --exclude=hparams \
        -C "$W" $(cd "$W" && ls -d logs-target grid halving prep 2>/dev/null) 2>/dev/null
    mv "$tmp" "$P/phase$phase.tgz"
  }
  tick() { while sleep 30; do snapshot; done; }

  prep() {  # the JPEG folder and data=mmap's pack (one verified step of a tiny model); skipped once done
    [[ -f $W/target-prep.done ]] && { echo "prep: done in an earlier phase"; return; }
    local start=$(date +%s)
    "${RUN[@]}" --name prep --out "$W/prep" --timeout "$(left)" --log "$LOGS/prep.log" -- \
        "${DATA[@]}" model=tiny_cnn data=mmap train.max_steps=1 runtime.progress=false \
        $([[ $SMOKE == 1 ]] && echo device=cpu) && touch "$W/target-prep.done"
    echo "prep (JPEG folder + pack): $(( $(date +%s) - start )) s" | tee -a "$LOGS/sweep-wall.txt"
  }

  sweep() {  # name, then the sweeper's own overrides: one resumable segment, its wall time appended
    local name=$1 start end code; shift
    [[ -f $W/$name.done ]] && { echo "$name: done in an earlier phase"; return 0; }
    start=$(date +%s.%N)
    TORCHINDUCTOR_CACHE_DIR="$W/inductor-$name" "${RUN[@]}" --name "$name" --out "$W/$name" --timeout "$(left)" \
        --log "$LOGS/$name.log" --multirun -- --config-dir "$PWD/$B/conf" "${MODEL[@]}" "${DATA[@]}" "${RECIPE[@]}" \
        "${TARGET[@]}" "${GRID[@]}" "$@" sweep.resume=true
    code=$?
    end=$(date +%s.%N)
    # The sweep process ended by itself (exit 0: every job ran, failed rows included); else, cut off by
    # the deadline (its running job checkpointed on SIGTERM), the next phase resumes it.
    if $PY -c 'import json, sys; rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = [r for r in rows if r.get("name") == sys.argv[2]][-1]; sys.exit(0 if last.get("exit_code") == 0 else 1)' \
        "$LOGS/runs.jsonl" "$name" 2> /dev/null; then
      touch "$W/$name.done"
    fi
    echo "$name segment: $($PY -c "print(round($end - $start, 1))") s wall (exit $code$([[ -f $W/$name.done ]] && echo ', finished' || echo ', cut off: resumed next phase'))" \
      | tee -a "$LOGS/sweep-wall.txt"
    rm -rf "$W/$name-throughput" && cp -r "$W/$name" "$W/$name-throughput" && \
      $PY -m fastpipe.report "$W/$name-throughput" --objective throughput --quiet > /dev/null 2>&1
    snapshot
  }

  compare() {  # target.md: both sweeps' wall times, winners and rankings side by side
    $PY $B/lib/rankings.py --table "$W" "$LOGS/sweep-wall.txt" > "$LOGS/target.md"
  }

  tick > /dev/null 2>&1 & TICKER=$!
  case $phase in
  1)
    { nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
      $PY -c 'import sys, torch, torchvision, hydra; print("python", sys.version.split()[0], "torch", torch.__version__,
"torchvision", torchvision.__version__, "cuda", torch.version.cuda, "hydra", hydra.__version__)'
      echo "cpu cores $(nproc)"; } > "$LOGS/gpu.txt" 2>&1
    cp "$LOGS/gpu.txt" "$P/gpu.txt"; cat "$LOGS/gpu.txt"
    prep
    ;;
  2) prep; sweep grid ;;
  3) prep; sweep grid; (( HALVING )) && sweep halving hydra/sweeper=halving ;;
  4) prep; sweep grid; (( HALVING )) && sweep halving hydra/sweeper=halving ;;
  *) echo "phase $phase: choose 1-4" >&2; exit 2 ;;
  esac
  compare
  kill "$TICKER" 2> /dev/null; wait "$TICKER" 2> /dev/null
  snapshot
  echo "== phase $phase: $(ls "$P" | tr '\n' ' ')"
  for f in "$P"/sweep-wall.txt "$P"/target.md; do [[ -f $f ]] && { echo "== $(basename "$f")"; cat "$f"; }; done
}

case $machine in
  cpu | h200) "$machine" "$@" ;;
  *) echo "$USAGE" >&2; exit 2 ;;
esac
