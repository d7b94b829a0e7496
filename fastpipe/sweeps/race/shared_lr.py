"""One range test for a whole race of ``optimizer.lr=auto`` jobs (``+sweep=lr``).

When configurations find their rate with the same range test (``optimizer.lr=auto`` with a fixed
``train.lr_find_seed``, differing only in ``optimizer.lr_auto_factor``), the test's answer is the same
in each of their jobs in every round. The race then runs it once, before round 0, as a job of its own
in ``lr-search/`` (``train.lr_find_only=true``), and each of their jobs reuses it
(``train.lr_find_from``): race.json's ``lr_search`` names the folder, the suggestion and the
configurations, each job's metrics.json ``lr_search.reused_from`` the folder. Other configurations (a
given rate) race as they are.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from omegaconf import OmegaConf

from fastpipe.errors import ConfigError
from fastpipe.record import results
from fastpipe.record.overrides import quote

FOLDER = "lr-search"
FACTOR = "optimizer.lr_auto_factor"


def sharing(configs: list) -> List[int]:
    """The configurations (their grid numbers) among the composed ``configs`` that run the same range
    test: lr=auto with a fixed lr_find_seed, no lr_find_from of their own, and nothing else different but
    the factor and the seed (``+sweep=lr``'s given rate is not one of them); [] when fewer than two do."""
    def essence(c) -> dict:
        plain = OmegaConf.to_container(c, resolve=False)
        plain.pop("hydra", None)
        plain.pop("seed", None)
        plain.get("optimizer", {}).pop("lr_auto_factor", None)
        return plain

    auto = [i for i, c in enumerate(configs) if str(c.optimizer.get("lr")) == "auto"
            and c.train.get("lr_find_seed") is not None and not c.train.get("lr_find_from")
            and not c.train.get("lr_find_only")]
    if len(auto) < 2:
        return []
    first = essence(configs[auto[0]])
    return auto if all(essence(configs[i]) == first for i in auto[1:]) else []


def search_job(combo: List[str]) -> List[str]:
    """The range test's own job: the first configuration's overrides without its factor, test only."""
    own = [o for o in combo if not o.lstrip("+~").startswith((f"{FACTOR}=", "seed="))]
    return own + ["train.lr_find_only=true", f"hydra.sweep.subdir={FOLDER}"]


def found(sweep_dir: Path) -> dict:
    """race.json's ``lr_search``: ``{folder, suggestion}``; ConfigError (one line) when the test failed."""
    metrics = results.read(Path(sweep_dir) / FOLDER)
    search = (metrics or {}).get("lr_search") if isinstance(metrics, dict) else None
    if not isinstance(search, dict) or metrics.get("status") != "ok":
        why = (metrics or {}).get("reason") if isinstance(metrics, dict) else None
        raise ConfigError(f"the race's range test ({Path(sweep_dir) / FOLDER}) did not finish"
                          f"{f': {why}' if why else ''}; no round was run (the same command with sweep.resume=true "
                          "tries it again)")
    return {"folder": FOLDER, "suggestion": search["suggestion"]}


def reuse(sweep_dir: Path, lr_search: Optional[dict], num: int) -> List[str]:
    """The override configuration ``num``'s job gets to reuse the race's range test (none without one, or
    for a configuration that does not share it)."""
    if not lr_search or num not in lr_search.get("jobs", ()):
        return []
    return [f"train.lr_find_from={quote(str((Path(sweep_dir) / lr_search['folder']).resolve()))}"]
