#!/usr/bin/env bash
# Successive halving against the full grid on the 2-core CPU: the 2 x 2 x 2 grid
# precision=fp32,amp x compile=off,default x data=default,mmap (8 jobs) on the built-in shapes
# dataset (TinyCNN, 2,400 images at 32 px), train.epochs=60 so that training dominates start-up (halving's finalists and baseline
# still train in full, so short jobs leave it little to save),
# run once in full (Hydra's basic sweeper) and once with hydra/sweeper=halving at its defaults
# (probe_steps=30, keep=0.5, finalists=2). Both sweeps share a dataset cache made before the clock
# starts (the shapes images and the mmap pack are one-off costs), and each gets a fresh, empty
# Inductor cache, so both pay their compilations and only halving's probe-to-full-run reuse differs.
#
# Checked: halving's winner is within 5 % of the grid's best throughput, and halving takes at most
# 60 % of the grid's wall time. "Within 5 %" is judged on the grid's own measurements (the grid's
# throughput of the combination halving picked against the grid's winner), which removes the
# run-to-run noise of a shared VM; halving's own measurement of its winner is printed beside it.
#   D=$(bash benchmarks/lib/result_dir.sh halving cpu) && bash benchmarks/halving.sh > "$D/halving.log" 2>&1
# Run it on an idle machine (uptime's load below 1): concurrent work skews both the throughputs
# and the wall times.
set -euo pipefail
work=${1:-$(mktemp -d)}
mkdir -p "$work"
rm -f "$work/walls.txt"
grid=(precision=fp32,amp compile=off,default data=default,mmap)
common=(train.epochs="${EPOCHS:-60}" runtime.progress=false)  # EPOCHS=1: a quick check of the script itself
export FASTPIPE_CACHE="$work/data-cache"
echo "# $(date -u '+%F %T') UTC · $(nproc) CPU cores · $(python -c 'import torch; print("torch", torch.__version__)')" \
  "· fastpipe $(git rev-parse --short HEAD 2>/dev/null || echo "?") · load $(cut -d' ' -f1-3 /proc/loadavg) · work folder $work"
echo "# grid: ${grid[*]} ${common[*]}"

# The dataset and the mmap pack, once, outside the timings.
python -m fastpipe data=mmap train.max_steps=1 measure.warmup_steps=1 runtime.progress=false \
  "hydra.run.dir=$work/prime" > "$work/prime.log" 2>&1

run_sweep() {  # a name, then the sweep's own arguments
  local name=$1 start end
  shift
  rm -rf "${work:?}/$name" "${work:?}/$name-inductor"
  start=$(date +%s.%N)
  TORCHINDUCTOR_CACHE_DIR="$work/$name-inductor" python -m fastpipe -m "${grid[@]}" "${common[@]}" "$@" \
    "hydra.sweep.dir=$work/$name" > "$work/$name.log" 2>&1
  end=$(date +%s.%N)
  echo "$name wall_s=$(echo "$end - $start" | bc) load_after=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$work/walls.txt"
}

run_sweep grid
run_sweep halving hydra/sweeper=halving

printf '\n## grid report\n'
cat "$work/grid/report.md"
printf '\n## halving report\n'
cat "$work/halving/report.md"
printf '\n## summary\n'
python - "$work" <<'PY'
import csv
import sys
from pathlib import Path

work = Path(sys.argv[1])
keys = ("precision", "compile", "data")


def rows(name):
    with open(work / name / "report.csv") as fh:
        return list(csv.DictReader(fh))


def combo(r):
    return " ".join(f"{k}={r[k]}" for k in keys)


grid, halving = rows("grid"), rows("halving")
g_best = next(r for r in grid if r["best"] == "True")
h_best = next(r for r in halving if r["best"] == "True")
picked = next(r for r in grid if combo(r) == combo(h_best))
gap = 1 - float(picked["throughput"]) / float(g_best["throughput"])
own = float(h_best["throughput"]) / float(g_best["throughput"]) - 1
print(f"grid winner:    {combo(g_best)}: {float(g_best['throughput']):,.1f} samples/s")
print(f"halving winner: {combo(h_best)}: {float(picked['throughput']):,.1f} samples/s in the grid, "
      f"{float(h_best['throughput']):,.1f} in the halving sweep ({100 * own:+.1f} % vs the grid's winner)")
print(f"winner check: halving's pick is {100 * gap:.1f} % below the grid's winner, by the grid's measurements "
      f"({'PASS' if gap <= 0.05 else 'FAIL'}: at most 5 %)")
print("pruned: " + "; ".join(f"{combo(r)} in round {r['round']}" for r in halving if r["status"] == "pruned"))
walls = {}
for line in (work / "walls.txt").read_text().splitlines():
    walls[line.split()[0]] = float(line.split("wall_s=")[1].split()[0])
share = walls["halving"] / walls["grid"]
print(f"time check: grid {walls['grid']:,.0f} s, halving {walls['halving']:,.0f} s = {100 * share:.0f} % of the "
      f"grid's wall time ({'PASS' if share <= 0.60 else 'FAIL'}: at most 60 %)")
PY
