"""The rounds of a halving sweep by throughput, launched through any launcher (plan.py says what a round is):
probes of the combinations still in, the fastest share kept, then the finalists' and the baseline's full runs."""
from __future__ import annotations

import logging
import time
from typing import List, Optional

from fastpipe.record import results
from fastpipe.sweeps.halving.plan import Grid, HalvingRecord, HalvingSettings, Launch, probe_folder, select

log = logging.getLogger(__name__)


def run_probes(launch: Launch, plan: HalvingSettings, grid: Grid, inductor_cache: Optional[str]) -> HalvingRecord:
    """Probe rounds until ``plan.finalists`` are left, then the full runs (the baseline first); returns the record."""
    record = HalvingRecord(settings={"probe_steps": plan.probe_steps, "keep": plan.keep,
                                     "finalists": plan.finalists, "inductor_cache": inductor_cache},
                           combos=grid.combos, baseline=grid.baseline, probe_keys=["train.max_steps", "report.repeats"],
                           parallel=grid.parallel)
    record.write(grid.folder)
    alive = [n for n in range(len(grid.combos)) if n != grid.baseline]
    log.info(f"Successive halving of {len(grid.combos)} combinations: baseline #{grid.baseline} runs in full; "
             f"{len(alive)} probed ({plan.probe_steps} steps after warm-up in round 1), {plan.finalists} finalist(s)")
    while len(alive) > plan.finalists:
        alive = _probe_round(launch, record, plan, grid, alive)
    record.finals = [grid.baseline] + sorted(alive)
    record.finals_started = time.time()
    record.write(grid.folder)
    log.info(f"Full runs: {record.finals} (the baseline first)")
    launch([grid.combos[n] + [f"hydra.sweep.subdir={n}"] + grid.extra for n in record.finals], "the full runs")
    record.finals_ended = record.ended = time.time()
    record.write(grid.folder)
    return record


def _probe_round(launch: Launch, record: HalvingRecord, plan: HalvingSettings, grid: Grid,
                 alive: List[int]) -> List[int]:
    """One round: probe every combination still in, keep the fastest share; returns those kept."""
    round_no = len(record.rounds) + 1
    steady, folder = plan.probe_steps_in(round_no), probe_folder(round_no)
    batch = []
    for n in alive:
        probe = [f"train.max_steps={int(grid.configs[n].measure.warmup_steps) + steady}"]
        if int(grid.configs[n].report.repeats) != 1:
            probe.append("report.repeats=1")  # a probe ranks; repeats are for the full runs
        batch.append(grid.combos[n] + probe + [f"hydra.sweep.subdir={folder}/{n}"] + grid.extra)
    entry = {"round": round_no, "folder": folder, "steps": steady, "jobs": list(alive), "started": time.time()}
    log.info(f"Round {round_no}: {len(alive)} probes of {steady} steady-state steps")
    launch(batch, f"round {round_no} (its probes in {folder}/)")
    probes = {n: results.read(grid.folder / folder / str(n)) for n in alive}
    outcome = select(probes, plan.keep, plan.finalists)
    entry.update(ended=time.time(), kept=outcome.kept, dropped=outcome.dropped, failed=outcome.failed,
                 cutoff=outcome.cutoff, throughput={str(n): (m or {}).get("throughput") for n, m in probes.items()})
    record.rounds.append(entry)
    record.write(grid.folder)
    log.info(f"Round {round_no}: kept {outcome.kept}, dropped {outcome.dropped}"
             + (f", failed {outcome.failed}" if outcome.failed else ""))
    return outcome.kept
