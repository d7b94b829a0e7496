#!/usr/bin/env bash
# On two H200s: DDP and DALI profiled and tuned, the best loader at batch 256/512 x compile modes
# (towards 7,000 img/s), and the JPEG sweep on the v2 shapes generator with enough steps for accuracy
# to mean something. Five phases, one `device` call each, back to back on
# nvidia-h200-x2 (the machine keeps /tmp while warm: DALI's parts, the JPEG folder, the mmap pack,
# Inductor's cache and the sweep folders carry over). Single-GPU runs use GPU 0. Every phase packs
# its logs and reports into $OUT/phaseN.tgz, writes its profiler trace as $OUT/trace-NAME.json.gz
# (benchmarks/trace_summary.py reads it; its summary is in the logs) and prints a short table last:
#   bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/h200_ddp_dali_jpeg_v2.sh N
# Phases: 1 the JPEG folder and its pack; DDP 1 vs 2 GPUs (compiled: default, bf16 gradients,
#           one 100 MB bucket, a profiled run; eager: default)
#         2 the JPEG sweep (default, mmap) x precision x compile
#         3 the sweep's remaining jobs; the best loader (mmap) at batch 256/512 x compile
#           default/reduce-overhead; a profiled mmap run
#         4 with DALI installed: a profiled DALI run, then DALI's executor x threads (2 epochs)
#         5 (not run yet) the sweep's DALI rows; mmap and dali with reduce-overhead at 256/512
#           (prepares the JPEG folder itself: it can be the first call on a fresh machine, after DALI)
# The run of 2026-11-29 ran phase 1 as written but with a 150 s limit on its preparation step,
# phase 2 as written, phase 3 with DEADLINE=250 and phase 4 as written but with a 100 s limit on
# its profiled run (30 minutes of device time in all); its results:
# benchmarks/results/h200-2026-11-29-s2/.
# SMOKE=1 runs every phase on a CPU with a tiny model and dataset: it checks the commands, not speed.
set -uo pipefail
phase=$1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${WORK:-/tmp}  # where datasets, caches, runs and logs go
export FASTPIPE_CACHE=$W/fpcache TORCHINDUCTOR_CACHE_DIR=$W/inductor-cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1  # the machine's rule: no NVLink multicast
PY=${PY:-python3}
LOGS=$W/logs; mkdir -p $LOGS
# ImageNet-like JPEG folder: 8,192 generated images of 500x375 (80 % train: 25 steps of 256 per
# epoch), trained at 224 with random-resized-crop + flip. zero_init_residual + a short warm-up let
# ResNet-50 learn the shapes within the sweep's 100 steps, so its accuracy column compares something.
MODEL=(model=resnet50 +model.kwargs.zero_init_residual=true)
DATA=(dataset=shapes "dataset.source_size=[500,375]" dataset.num_images=8192 dataset.image_size=224
      dataset.augment=true train.batch_size=256 train.epochs=4 lr_schedule.warmup_steps=10
      measure.warmup_steps=10 measure.window=5 runtime.progress=false)
DDP=(--nproc 2 --warmup 20 --steps 100); DDP_EAGER=(--nproc 2 --warmup 10 --steps 60); BATCHES=256,512
if [[ ${SMOKE:-0} == 1 ]]; then
  MODEL=(model=tiny_cnn)
  DATA=(dataset=shapes "dataset.source_size=[48,36]" dataset.num_images=320 dataset.image_size=32 dataset.augment=true
        train.batch_size=16 train.epochs=2 lr_schedule.warmup_steps=2 measure.warmup_steps=2 measure.window=2
        runtime.progress=false device=cpu)
  DDP=(--smoke); DDP_EAGER=(--smoke); BATCHES=16,32
fi
PROFILE=(profile=on profile.wait=10 profile.warmup=2 profile.active=5 train.epochs=1)
[[ ${SMOKE:-0} == 1 ]] && PROFILE=(profile=on profile.wait=2 profile.warmup=1 profile.active=3 train.epochs=1)
JPEG=("${MODEL[@]}" "${DATA[@]}")
SWEEP=$W/jpeg-sweep
# One device call may run 600 s: every step gets at most what is left before DEADLINE, less a
# margin for packing the results, so a slow step shortens the next instead of losing the phase.
DEADLINE=${DEADLINE:-540}
cap() { local left=$((DEADLINE - SECONDS)); ((left < $1)) && echo $((left > 5 ? left : 5)) || echo "$1"; }

sweep() {  # seconds, loaders: the JPEG sweep, resumed: finished jobs are skipped, stopped ones continue
  timeout -k 15 "$(cap "$1")" $PY -m fastpipe -m "${JPEG[@]}" data=$2 precision=fp32,amp compile=off,default \
      sweep.resume=true hydra.sweep.dir=$SWEEP >> $LOGS/sweep.log 2>&1
  echo "sweep exit $?" | tee -a $LOGS/sweep.log
  timeout -k 15 $(cap 60) $PY -m fastpipe.report $SWEEP > $LOGS/sweep-report-stdout.log 2>&1
}

profiled() {  # name, overrides...: one profiled run on GPU 0 (in an empty folder), its trace summarised
  local name=$1; shift
  rm -rf $W/profile-$name
  CUDA_VISIBLE_DEVICES=0 timeout -k 15 $(cap 120) $PY -m fastpipe "${JPEG[@]}" "$@" "${PROFILE[@]}" \
      hydra.run.dir=$W/profile-$name > $LOGS/profile-$name.log 2>&1
  echo "profile $name exit $?" | tee -a $LOGS/profile-$name.log
  $PY benchmarks/trace_summary.py $W/profile-$name/profile/*.pt.trace.json* | tee $LOGS/trace-$name.txt
  gzip -c "$(ls $W/profile-$name/profile/*.pt.trace.json | head -1)" > "$OUT/trace-$name.json.gz"  # repeat=1: one file
}

pack() {  # everything this phase made, without TensorBoard events and checkpoints
  tar czf "$OUT/phase$phase.tgz" --exclude='tb' --exclude='checkpoints' --exclude='*.pt.trace.json' \
      -C $W logs $(cd $W && ls -d jpeg-sweep jpeg-sweep-dali best best-ro dali-tune ddp ddp-eager profile-* prep 2>/dev/null)
}

case $phase in
1)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv | tee $LOGS/gpu.txt
  $PY -c 'import torch, torchvision, hydra; print("torch", torch.__version__, "torchvision", torchvision.__version__,
"cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "hydra", hydra.__version__)' | tee -a $LOGS/gpu.txt
  # The JPEG folder and data=mmap's pack cache (one step of a tiny model). The run of 2026-11-29 had a
  # 150 s limit here, which cut the run after generating and packing (one-threaded generation is slow).
  CUDA_VISIBLE_DEVICES=1 timeout -k 15 $(cap 300) $PY -m fastpipe model=tiny_cnn "${DATA[@]}" data=mmap train.max_steps=1 \
      hydra.run.dir=$W/prep > $LOGS/prep.log 2>&1; echo "prep exit $?" | tee -a $LOGS/prep.log
  timeout -k 15 $(cap 330) $PY benchmarks/ddp.py --out $W/ddp "${DDP[@]}" \
      --variant "bf16-grads:launcher.comm_hook=bf16" --variant "one-bucket:launcher.bucket_cap_mb=100" --profile \
      > $LOGS/ddp-stdout.log 2>&1
  $PY benchmarks/trace_summary.py $W/ddp/runs/profile/profile/*.pt.trace.json* | tee $LOGS/trace-ddp.txt
  gzip -c "$(ls $W/ddp/runs/profile/profile/*.pt.trace.json | head -1)" > "$OUT/trace-ddp.json.gz"  # ddp.py empties runs/profile first
  timeout -k 15 $(cap 90) $PY benchmarks/ddp.py --out $W/ddp-eager --compile off "${DDP_EAGER[@]}" \
      > $LOGS/ddp-eager-stdout.log 2>&1
  pack; cat $W/ddp/ddp.md $W/ddp-eager/ddp.md
  ;;
2)
  sweep 500 default,mmap
  pack; cat $SWEEP/report.md
  ;;
3)
  sweep 150 default,mmap  # only what phase 2 left
  # The best loader at two batch sizes x two compile modes (b256/default repeats the sweep's row).
  CUDA_VISIBLE_DEVICES=0 timeout -k 15 $(cap 380) $PY -m fastpipe -m "${JPEG[@]}" data=mmap precision=amp \
      compile=default,reduce-overhead train.batch_size=$BATCHES hydra.sweep.dir=$W/best > $LOGS/best.log 2>&1
  echo "best exit $?"; timeout -k 15 $(cap 60) $PY -m fastpipe.report $W/best > /dev/null 2>&1
  profiled mmap data=mmap precision=amp compile=default
  pack; cat $W/best/report.md
  ;;
4)  # as run on 2026-11-29 (the sweep's DALI rows are phase 5's)
  profiled dali data=dali precision=amp compile=default  # run on 2026-11-29 with a 100 s limit
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 170 $PY -m fastpipe -m "${JPEG[@]}" data=dali precision=amp compile=default \
      train.epochs=2 data.exec_dynamic=true,false data.num_threads=auto,8 hydra.sweep.dir=$W/dali-tune \
      > $LOGS/dali-tune.log 2>&1; echo "tune exit $?"
  timeout 30 $PY -m fastpipe.report $W/dali-tune > /dev/null 2>&1
  pack; cat $W/dali-tune/report.md
  ;;
5)  # not run yet; needs DALI (the 4th part) and works on a fresh machine: the JPEG folder and pack
    # first (skipped when present), then the sweep's DALI rows in their own folder, and mmap / dali
    # with CUDA graphs at batch 256 and 512 (the runs that could pass 7,000 img/s)
  $PY -c 'import nvidia.dali as d; print("dali", d.__version__)' | tee -a $LOGS/gpu.txt
  CUDA_VISIBLE_DEVICES=0 timeout -k 15 $(cap 300) $PY -m fastpipe model=tiny_cnn "${DATA[@]}" data=mmap \
      train.max_steps=1 hydra.run.dir=$W/prep > $LOGS/prep.log 2>&1; echo "prep exit $?" | tee -a $LOGS/prep.log
  timeout -k 15 "$(cap 200)" $PY -m fastpipe -m "${JPEG[@]}" data=dali precision=fp32,amp compile=off,default \
      sweep.resume=true hydra.sweep.dir=$W/jpeg-sweep-dali >> $LOGS/sweep-dali.log 2>&1; echo "dali rows exit $?"
  timeout -k 15 $(cap 30) $PY -m fastpipe.report $W/jpeg-sweep-dali > /dev/null 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout -k 15 $(cap 230) $PY -m fastpipe -m "${JPEG[@]}" data=mmap,dali precision=amp \
      compile=reduce-overhead train.batch_size=$BATCHES hydra.sweep.dir=$W/best-ro > $LOGS/best-ro.log 2>&1
  timeout -k 15 $(cap 30) $PY -m fastpipe.report $W/best-ro > /dev/null 2>&1
  pack; cat $W/jpeg-sweep-dali/report.md $W/best-ro/report.md
  ;;
esac
