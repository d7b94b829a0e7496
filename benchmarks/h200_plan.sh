#!/usr/bin/env bash
# The H200 plan: the GPU questions of benchmarks/README.md in four `device` calls. fastpipe measured
# against hand-written loops (ResNet-50 and GPT-2 small), what checkpoints cost,
# DDP's remaining levers, FSDP2 and a 10B GPT, and the JPEG pipeline at batch 256/512 with CUDA graphs
# and max-autotune, through mmap and DALI. Four phases, one `device` call each, back
# to back on nvidia-h200-x2 (the machine keeps /tmp while warm: the JPEG folder, the mmap pack,
# Inductor's cache and DALI's parts carry over). From the repository root:
#   bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/h200_plan.sh N
# carrying .devwheels/base and .devwheels/daliK in call K+1 (install.sh installs DALI in call 4).
#
# Phases (default wall-clock deadline of each; the four must fit 30 minutes of device time with the
# machine's start, so each phase also stops by BUDGET seconds after phase 1 began). On two GPUs:
#   1 (340 s) GPU facts; two streams at once, one per GPU on half the cores each (taskset), because
#     the session is short: GPU 0 overhead.py (resnet50 eager and compile=default vs lib/handloop.py,
#     15 warm-up + 100 steps) then checkpoint_stall.py; GPU 1 the JPEG folder and its mmap pack (8,192
#     images of 500x375), then lm.py (gpt2_small, fastpipe vs lib/lm_handloop.py, 2 repeats). Every
#     comparison is paired inside its stream in alternating order, so the other stream's load falls
#     on both sides of it.
#   2 (420 s) DDP on both GPUs: ddp.py, compiled ResNet-50, with the levers this fastpipe offers
#     (variants whose key it lacks are rows 'skipped: key not in this fastpipe'); then lm.py --nproc 2
#     (DDP and FSDP), then a 10B GPT (32 layers, 5,120 wide) that one GPU and DDP cannot hold with
#     AdamW, on one GPU, DDP and FSDP (the first two are failed rows with their out-of-memory reason).
#   3 (380 s) ResNet-50 224 end to end from the JPEGs through data=mmap, SGD with lr 0.1 x batch/256
#     (benchmarks/conf/batch), bf16: compile default, reduce-overhead, max-autotune (last: it compiles
#     for minutes, the deadline may cut it) x batch 256, 512, one sweep whose report is the result; on
#     both GPUs at once through hydra/launcher=gpus.
#   4 (300 s, DALI installed) phase 3's fastest configuration through data=dali (decoder=mixed,
#     hw_decoder_load 0.65/1.0 x num_threads auto/16, 2 epochs), then the seeds' ladder
#     (+sweep=ladder), one job at a time on GPU 0 (loaders' CPU work would disturb each other).
# On one GPU (nvidia-h200; NGPU=1 forces it) the same work in one stream, without what needs two GPUs:
#   1 (390 s) GPU facts, overhead.py, then lm.py (one repeat).
#   2 (320 s) the JPEG folder and its pack, checkpoint_stall.py, lm.py with launcher=fsdp on one GPU
#     (FSDP2's CUDA path: NCCL, bf16 parameters, sharded checkpoint), and the 10B GPT on one GPU (its
#     out-of-memory row: what FSDP on two GPUs is for).
#   3 (400 s) as above without max-autotune (its minutes of compiling do not fit), on the one GPU.
#   4 (290 s) as above with num_threads auto only.
# Each phase writes as it goes to $OUT/pN/: its short tables (.md/.csv) and phaseN.tgz (every log and
# the runs' metrics.json, graph.txt and configs, without checkpoints, TensorBoard events or traces),
# refreshed after every step and every 30 s, at most 8 files; it prints its tables last.
# SMOKE=1 runs a phase on this CPU with tiny models and data (WORK and OUT under /tmp/fp-smoke by
# default): it checks the commands, not speed.
set -uo pipefail
phase=${1:?usage: h200_plan.sh PHASE (1-4)}
SMOKE=${SMOKE:-0}
if [[ $SMOKE == 1 ]]; then W=${WORK:-/tmp/fp-smoke}; OUT=${OUT:-$W/out}; else W=${WORK:-/tmp}; OUT=${OUT:-/tmp/out}; fi
P=$OUT/p$phase; LOGS=$W/logs-p$phase; mkdir -p "$P" "$LOGS"
export FASTPIPE_CACHE=$W/fpcache TORCHINDUCTOR_CACHE_DIR=$W/inductor-cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # the machine's rule
PY=${PY:-python3}
B=benchmarks
if [[ -z ${NGPU:-} && $SMOKE == 1 ]]; then
  NGPU=2  # the CPU smoke walks the two-GPU plan unless NGPU=1 is given
elif [[ -z ${NGPU:-} ]]; then
  NGPU=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
fi

# --- time: this phase's deadline, never past the session's budget (counted from phase 1's start)
if (( NGPU >= 2 )); then PHASE_S=(0 340 420 380 300); else PHASE_S=(0 390 320 400 290); fi
DEADLINE=${DEADLINE:-${PHASE_S[$phase]}}
BUDGET=${BUDGET:-1420}  # 24 min of phases; the machine's start, installs and transfers take the rest of 30
[[ $phase == 1 || ! -f $W/session-start ]] && date +%s > "$W/session-start"
if [[ $SMOKE == 1 ]]; then DEADLINE=${DEADLINE_SMOKE:-180}; else
  session_left=$(( $(cat "$W/session-start") + BUDGET - $(date +%s) ))
  (( session_left < DEADLINE )) && DEADLINE=$(( session_left > 60 ? session_left : 60 ))
fi
END=$(( $(date +%s) + DEADLINE - 15 ))  # 15 s kept for the last snapshot
left() { local s=$(( END - $(date +%s) )); echo $(( s > 5 ? s : 5 )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }
echo "phase $phase: deadline ${DEADLINE} s, $NGPU GPU(s) (SMOKE=$SMOKE, work $W, out $P)"

# --- the workloads
RUN=("$PY" $B/lib/runner.py --jsonl "$LOGS/runs.jsonl")  # one fastpipe run or sweep, a row per call
HALF=$(( $(nproc) / 2 )); HALF=$(( HALF > 0 ? HALF : 1 ))
pin() { command -v taskset > /dev/null && (( $(nproc) > 1 )) && taskset -cp "$1" "$BASHPID" > /dev/null; }  # this shell and its children
CORES_A=0-$((HALF - 1)); CORES_B=$HALF-$(( $(nproc) - 1 ))
# ImageNet-like JPEG folder: 8,192 generated images of 500x375 (80 % train: 25 steps of 256 per
# epoch), trained at 224 with random-resized-crop + flip; zero_init_residual and a 10-step lr warm-up
# let ResNet-50 learn the shapes in 100 steps.
DATA=(dataset=shapes "dataset.source_size=[500,375]" dataset.num_images=8192 dataset.image_size=224
      dataset.augment=true train.epochs=4 measure.warmup_steps=10 measure.window=5 runtime.progress=false)
MODEL=(model=resnet50 +model.zero_init_residual=true)
BATCHES=b256,b512; BATCH0=b256; COMPILES=default,reduce-overhead,max-autotune; DEV=(); LANES=(hydra.launcher.gpus_per_job=1)
DALI_KNOBS=(data.decoder=mixed data.num_threads=auto,16)
OVERHEAD=(--models resnet50 --compile off,default --warmup 15 --steps 100); CKPT=(); LM=(--repeats 2)
DDP=(--nproc 2 --warmup 20 --steps 100)
# DDP's levers, one per variant against plain DDP (each effect alone); keys this fastpipe lacks are skipped.
VARIANTS=(--variant "no-broadcast:launcher.broadcast_buffers=false" --variant "static-graph:launcher.static_graph=true"
          --variant "python-reducer:compile.optimize_ddp=python_reducer" --variant "compiled-autograd:compile.compiled_autograd=true")
LM_DDP=(--nproc 2 --launcher ddp,fsdp --no-hand --repeats 1)
LM_FSDP1=(--nproc 1 --launcher fsdp --no-hand --no-single --repeats 1)  # one GPU: FSDP2's CUDA path
# 10B parameters: 160 GB of fp32 weights, gradients and AdamW state: more than one H200 holds
BIG=(--shape 32,40,5120 --activation-checkpointing --batch 4 --compile off --no-hand --warmup 3 --steps 12
     --window 3 --repeats 1)
LADDER=(+sweep=ladder)
if [[ $SMOKE == 1 ]]; then
  DATA=(dataset=shapes "dataset.source_size=[48,36]" dataset.num_images=320 dataset.image_size=32 dataset.augment=true
        train.epochs=2 measure.warmup_steps=2 measure.window=2 runtime.progress=false)
  MODEL=(model=tiny_cnn); BATCHES=b16,b32; BATCH0=b16; COMPILES=off; DEV=(device=cpu launcher.fresh_process=false)
  LANES=(hydra.launcher.gpus_per_job=0)  # jobs on the CPU
  DALI_KNOBS=(data.decoder=cpu data.num_threads=1)
  OVERHEAD=(--smoke); CKPT=(--smoke); LM=(--smoke --repeats 1); DDP=(--smoke); VARIANTS=("${VARIANTS[@]:0:2}")  # one variant: CPU DDP runs are slow
  LM_DDP=(--smoke --nproc 2 --launcher ddp,fsdp --no-hand --repeats 1)
  LM_FSDP1=(--smoke "${LM_FSDP1[@]}")
  BIG=(--smoke --shape 2,2,64 --activation-checkpointing --no-hand --repeats 1)
  LADDER=(+sweep=ladder compile=off train.epochs=1)  # CPU compiles take minutes: the ladder's commands, not its steps
fi
if (( NGPU < 2 )); then
  COMPILES=${COMPILES/,max-autotune/}; DALI_KNOBS=("${DALI_KNOBS[0]}" data.num_threads=auto); LM=("${LM[@]}" --repeats 1)
  LANES=(hydra.launcher.gpus_per_job=$(( SMOKE == 1 ? 0 : 1 )))
fi
JPEG=("${MODEL[@]}" "${DATA[@]}" lr_schedule.warmup_steps=10 optimizer=sgd "${DEV[@]}")

# --- results: copied to $P after every step and every 30 s (a call cut off keeps what was measured)
TABLES=()  # "source destination-name" pairs
snapshot() {
  local pair src dst tmp=$P/.phase$phase.tgz.$BASHPID
  for pair in "${TABLES[@]}"; do
    src=${pair% *}; dst=${pair#* }; [[ -f $src ]] && cp "$src" "$P/.$dst.$BASHPID" && mv "$P/.$dst.$BASHPID" "$P/$dst"
  done
  tar czf "$tmp" --exclude=checkpoints --exclude=tb --exclude=profile --exclude='*.pt' --exclude='*.pt.trace.json*' \
      --exclude='*.fppack' --exclude='.phase*' -C "$W" $(cd "$W" && ls -d logs-p$phase $RESULTS 2>/dev/null) 2>/dev/null
  mv "$tmp" "$P/phase$phase.tgz"
}
RESULTS=""  # folders under $W this phase writes
tick() { while sleep 30; do snapshot; done; }
step_done() { echo "[$(date +%T)] $1 done, $(left) s left"; snapshot; }

prep() {  # the JPEG folder and data=mmap's pack (one step of a tiny model); skipped once done
  [[ -f $W/prep.done ]] && { echo "prep: done in an earlier phase"; return; }
  "${RUN[@]}" --name prep --out "$W/prep" --timeout "$(cap 300)" --log "$LOGS/prep.log" -- \
      "${DATA[@]}" model=tiny_cnn "${DEV[@]}" data=mmap train.max_steps=1 && touch "$W/prep.done"
}

sweep() {  # name, seconds, overrides...: one fastpipe sweep (resumable) and its report
  local name=$1 secs=$2; shift 2
  "${RUN[@]}" --name "$name" --out "$W/$name" --timeout "$(cap "$secs")" --log "$LOGS/$name.log" --multirun -- \
      --config-dir "$PWD/$B/conf" "$@" sweep.resume=true
  timeout -k 5 "$(cap 60)" $PY -m fastpipe.report "$W/$name" > "$LOGS/$name-report.log" 2>&1
}

case $phase in
1)
  TABLES=("$LOGS/gpu.txt gpu.txt" "$W/overhead/overhead.md overhead.md" "$W/lm/lm.md lm.md"
          "$W/ckpt/checkpoint_stall.md checkpoint_stall.md"); RESULTS="overhead lm ckpt prep"
  tick > /dev/null 2>&1 & TICKER=$!  # no pipe held open by its sleep
  { nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    if [[ $SMOKE == 1 ]]; then  # the versions from the installed packages: a CPU check need not import torch
      $PY -c 'import sys; from importlib.metadata import version as v; print("python", sys.version.split()[0], "torch",
v("torch"), "torchvision", v("torchvision"), "hydra", v("hydra-core"), "(SMOKE: packages only)")'
    else
      $PY -c 'import sys, torch, torchvision, hydra; print("python", sys.version.split()[0], "torch", torch.__version__,
"torchvision", torchvision.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
"hydra", hydra.__version__, "gpus", torch.cuda.device_count())'
    fi; echo "cpu cores $(nproc)"; } > "$LOGS/gpu.txt" 2>&1
  cat "$LOGS/gpu.txt"
  if (( NGPU < 2 )); then
    TABLES=("${TABLES[@]:0:3}"); RESULTS="overhead lm"
    $PY $B/overhead.py --out "$W/overhead" "${OVERHEAD[@]}" --deadline "$(cap 220)" > "$LOGS/overhead-stdout.log" 2>&1
    step_done overhead
    $PY $B/lm.py --out "$W/lm" "${LM[@]}" --deadline "$(left)" > "$LOGS/lm-stdout.log" 2>&1; step_done lm
  else
  ( export CUDA_VISIBLE_DEVICES=0; pin "$CORES_A"
    $PY $B/overhead.py --out "$W/overhead" "${OVERHEAD[@]}" --deadline "$(cap 250)"; step_done overhead
    $PY $B/checkpoint_stall.py --out "$W/ckpt" "${CKPT[@]}" --deadline "$(left)"; step_done checkpoint_stall
  ) > "$LOGS/stream-gpu0.log" 2>&1 & GPU0=$!
  ( export CUDA_VISIBLE_DEVICES=1; pin "$CORES_B"
    prep; step_done prep
    $PY $B/lm.py --out "$W/lm" "${LM[@]}" --deadline "$(left)"; step_done lm
  ) > "$LOGS/stream-gpu1.log" 2>&1 & GPU1=$!
  wait $GPU0 $GPU1
  fi
  ;;
2)
  if (( NGPU < 2 )); then
    TABLES=("$W/ckpt/checkpoint_stall.md checkpoint_stall.md" "$W/lm-fsdp1/lm.md lm-fsdp1.md" "$W/lm-10b/lm.md lm-10b.md")
    RESULTS="ckpt lm-fsdp1 lm-10b prep"
    tick > /dev/null 2>&1 & TICKER=$!  # no pipe held open by its sleep
    prep; step_done prep
    $PY $B/checkpoint_stall.py --out "$W/ckpt" "${CKPT[@]}" --deadline "$(cap 120)" > "$LOGS/ckpt-stdout.log" 2>&1
    step_done checkpoint_stall
    $PY $B/lm.py --out "$W/lm-fsdp1" "${LM_FSDP1[@]}" --deadline "$(cap 110)" > "$LOGS/lm-fsdp1-stdout.log" 2>&1
    step_done lm-fsdp1
    $PY $B/lm.py --out "$W/lm-10b" "${BIG[@]}" --deadline "$(left)" > "$LOGS/lm-10b-stdout.log" 2>&1; step_done lm-10b
  else
    TABLES=("$W/ddp/ddp.md ddp.md" "$W/lm-ddp/lm.md lm-ddp.md" "$W/lm-10b/lm.md lm-10b.md"); RESULTS="ddp lm-ddp lm-10b"
    tick > /dev/null 2>&1 & TICKER=$!  # no pipe held open by its sleep
    $PY $B/ddp.py --out "$W/ddp" "${DDP[@]}" "${VARIANTS[@]}" --deadline "$(cap 240)" > "$LOGS/ddp-stdout.log" 2>&1
    step_done ddp
    $PY $B/lm.py --out "$W/lm-ddp" "${LM_DDP[@]}" --deadline "$(cap 170)" > "$LOGS/lm-ddp-stdout.log" 2>&1
    step_done lm-ddp
    $PY $B/lm.py --out "$W/lm-10b" "${BIG[@]}" --nproc 2 --launcher ddp,fsdp --deadline "$(left)" \
        > "$LOGS/lm-10b-stdout.log" 2>&1
    step_done lm-10b
  fi
  ;;
3)
  TABLES=("$W/s3-sweep/report.md report.md" "$W/s3-sweep/report.csv report.csv" "$LOGS/sweep-wall.txt sweep-wall.txt")
  RESULTS="s3-sweep prep"
  tick > /dev/null 2>&1 & TICKER=$!  # no pipe held open by its sleep
  prep; step_done prep
  if $PY -m fastpipe hydra/launcher=gpus "${LANES[@]}" --cfg hydra > /dev/null 2>&1; then
    lanes=(hydra/launcher=gpus "${LANES[@]}"); how="hydra/launcher=gpus (${LANES[*]}) on $NGPU GPU(s)"
  else
    lanes=(); how="Hydra's basic launcher, one job at a time on GPU 0 (no hydra/launcher=gpus in this fastpipe)"
    [[ $SMOKE == 1 ]] || export CUDA_VISIBLE_DEVICES=0
  fi
  # compile first on the command line: Hydra varies it slowest, so max-autotune's long compiles come last
  start=$(date +%s)
  sweep s3-sweep 9999 "${JPEG[@]}" data=mmap precision=amp compile=$COMPILES +batch=$BATCHES "${lanes[@]}"
  echo "JPEG sweep through data=mmap: $(( $(date +%s) - start )) s wall with $how" | tee "$LOGS/sweep-wall.txt"
  step_done sweep
  ;;
4)
  TABLES=("$LOGS/versions.txt versions.txt" "$W/s4-dali/report.md dali-report.md" "$W/s4-dali/report.csv dali-report.csv"
          "$W/s4-ladder/report.md ladder-report.md" "$W/s4-ladder/report.csv ladder-report.csv"); RESULTS="s4-dali s4-ladder prep"
  tick > /dev/null 2>&1 & TICKER=$!  # no pipe held open by its sleep
  $PY -c 'import nvidia.dali as d; print("dali", d.__version__)' > "$LOGS/versions.txt" 2>&1; cat "$LOGS/versions.txt"
  [[ $SMOKE == 1 ]] || export CUDA_VISIBLE_DEVICES=0
  prep; step_done prep
  # phase 3's fastest job: its +batch and compile choices (batch 256 with compile=default if none ran)
  best=$($PY - "$W/s3-sweep" <<'EOF'
import json, pathlib, sys
jobs = [json.loads(p.read_text()) for p in pathlib.Path(sys.argv[1]).glob("*/metrics.json")]
ok = [j for j in jobs if j.get("status") == "ok" and j.get("throughput")]
best = max(ok, key=lambda j: j["throughput"])["overrides"] if ok else []
picked = [o for o in best if o.startswith(("+batch=", "compile="))]
print(" ".join(picked) if len(picked) == 2 else "")
EOF
)
  [[ -n $best ]] || best=$([[ $SMOKE == 1 ]] && echo "+batch=b16 compile=off" || echo "+batch=b256 compile=default")
  echo "best of phase 3: $best" | tee -a "$LOGS/versions.txt"
  sweep s4-dali 180 "${JPEG[@]}" data=dali precision=amp $best "${DALI_KNOBS[@]}" "data.hw_decoder_load=0.65,1.0" train.epochs=2
  step_done dali
  sweep s4-ladder 9999 "${JPEG[@]}" +batch=$BATCH0 "${LADDER[@]}"
  step_done ladder
  ;;
*) echo "phase $phase: choose 1-4" >&2; exit 2 ;;
esac
[[ -n ${TICKER:-} ]] && { kill "$TICKER"; wait "$TICKER" 2> /dev/null; }  # (its last sleep ends by itself)
snapshot
echo "== phase $phase: $(ls "$P" | tr '\n' ' ')"
for f in "$P"/*.md "$P"/*.txt; do [[ -f $f ]] && { echo "== $(basename "$f")"; cat "$f"; }; done
