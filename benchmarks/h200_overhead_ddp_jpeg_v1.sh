#!/usr/bin/env bash
# On two H200s: fastpipe's overhead against a hand-written loop, DDP on 1 vs 2 GPUs, activation
# checkpointing and repeatability, and the JPEG sweep data x precision x compile on the first version
# of the shapes generator (v1). Four phases (one `device` call each, back to back, so that the
# machine's /tmp — DALI's parts, the generated JPEG folder, the mmap pack, Inductor's cache and the
# JPEG sweep folder — carries over). Every phase writes its logs and reports under $OUT and ends
# with a short table. Run from the repository root on the nvidia-h200-x2 machine:
#   bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/h200_overhead_ddp_jpeg_v1.sh 1
# Phases: 1 overhead vs the hand loop (GPU0) while the JPEG folder is generated and packed (GPU1)
#         2 DDP 1 vs 2 GPUs; activation checkpointing and repeatability (a sweep, report.repeats=2)
#         3 the JPEG sweep data x precision x compile (DALI rows fail until DALI's 4th part arrives)
#         4 the same sweep resumed with DALI installed: the DALI rows run, the report is rebuilt
set -uo pipefail
phase=$1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export FASTPIPE_CACHE=/tmp/fpcache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache PYTHONUNBUFFERED=1
PY=python3
# ImageNet-like JPEG folder: 4,096 generated images of 500x375, trained at 224 with augmentation.
JPEG=(model=resnet50 dataset=shapes "dataset.source_size=[500,375]" dataset.num_images=4096
      dataset.image_size=224 dataset.augment=true train.batch_size=256 train.epochs=6
      measure.warmup_steps=6 measure.window=6 runtime.progress=false)
SWEEP=/tmp/jpeg-sweep

case $phase in
1)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
  $PY -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"
  # GPU1: generate the JPEG folder and fill data=mmap's pack cache (one step of a tiny model).
  (CUDA_VISIBLE_DEVICES=1 $PY -m fastpipe "${JPEG[@]}" model=tiny_cnn data=mmap train.max_steps=1 \
     hydra.run.dir=/tmp/prep > "$OUT/prep.log" 2>&1; echo "prep exit $?" >> "$OUT/prep.log") &
  CUDA_VISIBLE_DEVICES=0 timeout 540 $PY benchmarks/overhead.py --out /tmp/overhead --models resnet50,resnet18 \
      --compile off,default --warmup 15 --steps 150 > "$OUT/overhead-stdout.log" 2>&1
  wait
  cp /tmp/overhead/overhead.md /tmp/overhead/overhead.jsonl /tmp/overhead/overhead.log "$OUT/" 2>/dev/null
  tail -3 "$OUT/prep.log"; cat "$OUT/overhead.md"
  ;;
2)
  timeout 330 $PY benchmarks/ddp.py --out /tmp/ddp --nproc 2 --warmup 20 --steps 150 > "$OUT/ddp-stdout.log" 2>&1
  cp /tmp/ddp/ddp.md /tmp/ddp/ddp.log "$OUT/" 2>/dev/null
  # Activation checkpointing off/on, each measured twice (report.repeats=2: the repeatability goal).
  CUDA_VISIBLE_DEVICES=0 timeout 230 $PY -m fastpipe -m model=resnet50 dataset=synthetic dataset.num_classes=1000 \
      dataset.image_size=224 dataset.num_images=25600 precision=amp precision.dtype=bf16 \
      model.activation_checkpointing=false,true train.batch_size=256 train.max_steps=100 \
      measure.warmup_steps=20 measure.window=10 runtime.progress=false report.repeats=2 \
      hydra.sweep.dir=/tmp/ac-sweep > "$OUT/ac-stdout.log" 2>&1
  $PY -m fastpipe.report /tmp/ac-sweep > /dev/null 2>&1  # also after a timeout: rows so far
  cp /tmp/ac-sweep/report.md "$OUT/ac-report.md"; cp /tmp/ac-sweep/report.csv "$OUT/ac-report.csv"
  cat "$OUT/ddp.md" "$OUT/ac-report.md"
  ;;
3|4)
  # Phase 3 ran with `timeout 560`, which (before commit "A stop signal ends a whole sweep") only
  # stopped the running job; phase 4 was then run with these shorter limits, to fit the lease.
  resume=$([[ $phase == 4 ]] && echo true || echo false)
  limit=$([[ $phase == 4 ]] && echo 420 || echo 560)
  timeout $limit $PY -m fastpipe -m "${JPEG[@]}" data=default,mmap,dali precision=fp32,amp compile=off,default \
      sweep.resume=$resume hydra.sweep.dir=$SWEEP > "$OUT/sweep-phase$phase.log" 2>&1
  echo "sweep exit $?"
  timeout 45 $PY -m fastpipe.report $SWEEP > "$OUT/report-stdout.log" 2>&1
  tar czf "$OUT/jpeg-sweep.tgz" -C $SWEEP --exclude='tb' --exclude='*.png' --exclude='checkpoints' . 2>/dev/null
  cp $SWEEP/report.md $SWEEP/report.csv $SWEEP/report.png "$OUT/" 2>/dev/null
  cat "$OUT/report.md"
  ;;
esac
