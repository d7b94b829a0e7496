#!/usr/bin/env bash
# Time to target on one H200: ResNet-50 at 224 px to 0.90 held-out accuracy on the 51,200-image
# shapes set (500x375 JPEGs, 40,978 train / 10,222 held out, random-resized-crop + flip), amp,
# data=mmap, SGD lr 0.1 at batch 256 scaled linearly (train.lr_scaling=linear), over
# compile off/default x batch 256/512 x resize schedule off/on (benchmarks/conf/resize: 160 px for
# the first 30 % of the steps, then 224): 8 jobs, once as a grid and once with
# hydra/sweeper=halving, each sweep with its own empty Inductor cache (both pay their compilations),
# their wall times side by side, each ranked by time to target beside its throughput ranking.
# Evaluations every 20 steps on the whole held-out split; at most 3 epochs per job.
#
# Phases, one `device` call each, back to back on nvidia-h200 (the machine keeps /tmp while warm: the
# JPEG folder, the pack and the sweep folders carry over). From the repository root:
#   bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/h200_target.sh N
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
phase=${1:?usage: h200_target.sh PHASE (1-4)}
SMOKE=${SMOKE:-0}; RESIZE=${RESIZE:-off,on}; HALVING=${HALVING:-1}
if [[ $SMOKE == 1 ]]; then W=${WORK:-/tmp/fp-target-smoke}; OUT=${OUT:-$W/out}; else W=${WORK:-/tmp}; OUT=${OUT:-/tmp/out}; fi
P=$OUT/p$phase; LOGS=$W/logs-target; mkdir -p "$P" "$LOGS"
export FASTPIPE_CACHE=$W/fpcache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # the machine's rule
PY=${PY:-python3}
B=benchmarks
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
RUN=("$PY" $B/runner.py --jsonl "$LOGS/runs.jsonl")

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
  if $PY -c 'import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if [r for r in rows if r.get("name") == sys.argv[2]][-1].get("exit_code") == 0 else 1)' \
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
  $PY - "$W" "$LOGS/sweep-wall.txt" > "$LOGS/target.md" <<'EOF'
import csv, re, sys
from pathlib import Path
work, walls = Path(sys.argv[1]), Path(sys.argv[2])
text = walls.read_text() if walls.is_file() else ""
print("# Time to target on one H200: grid and halving\n")
print("| sweep | wall time (s, all segments) | finished | winner (time to target) | its time (s) | winner by throughput | rankings |")
print("|---|---|---|---|---|---|---|")
for name in ("grid", "halving"):
    segs = [float(s) for s in re.findall(rf"^{name} segment: ([0-9.]+) s", text, re.M)]
    if not segs:
        continue
    def rows(folder):
        try:
            with open(folder / "report.csv") as fh:
                return list(csv.DictReader(fh))
        except OSError:
            return []
    by_time, by_rate = rows(work / name), rows(work / f"{name}-throughput")
    label = lambda r: f"#{r['job']} " + " ".join(o for o in r["overrides"].split() if o.split("=")[0] in  # noqa: E731
                                                 ("compile", "train.batch_size", "+resize"))
    win = next((r for r in by_time if r["best"] == "True"), None)
    rate = next((r for r in by_rate if r["best"] == "True"), None)
    order_t = [r["job"] for r in by_time if r["target_reached"] == "True"]
    order_r = [r["job"] for r in by_rate if r["throughput"] and r["job"] in order_t]
    agree = ("n/a: none reached the target" if not order_t else "agree" if order_t == order_r else
             f"disagree (time: {' '.join(order_t)}; throughput: {' '.join(order_r)})")
    print(f"| {name} | {sum(segs):,.0f} ({len(segs)}) | {(work / f'{name}.done').is_file()} | "
          f"{label(win) if win else 'none'} | {float(win['time_to_target_s']):,.1f} | " if win else
          f"| {name} | {sum(segs):,.0f} ({len(segs)}) | {(work / f'{name}.done').is_file()} | none | n/a | ", end="")
    print(f"{label(rate) if rate else 'none'} | {agree} |")
print()
for line in text.splitlines():
    if line.startswith("prep"):
        print(f"- {line}")
EOF
  cat "$LOGS/target.md" > /dev/null
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
