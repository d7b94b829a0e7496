"""``python -m fastpipe.consolidate CHECKPOINT OUT.pt``: a sharded checkpoint as one file for inference.

    python -m fastpipe.consolidate outputs/2026-11-30/10-00-00/checkpoints/step-00001000.dcp model.pt
    python -m fastpipe.consolidate outputs/2026-11-30/10-00-00 model.pt      # its newest complete one

CHECKPOINT is a ``step-*.dcp`` folder that launcher=fsdp wrote (or a run folder: its newest complete
one). Its files are checked against the sidecar first; then the model's shards (not the optimizer's)
are assembled in this one process, without GPUs or a process group, and written as a weights file:
``torch.load(OUT.pt)["model"]`` is a plain state dict for the model class, and the file (with its
``OUT.json`` sidecar) has the layout of the ``best.pt`` / ``last.pt`` files that ``fastpipe.load``
reads. Exit code 0, or 2 with one line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, List, NamedTuple, Optional

from fastpipe.errors import EXIT_CODE, ConfigError, DataError, FastpipeError


def say(text: str) -> None:
    print(f"fastpipe.consolidate: {text}", file=sys.stderr, flush=True)


def sharded_checkpoint(path: Path, log: Callable[[str], None] = say) -> Path:
    """``path`` itself when it is a complete sharded checkpoint; a run folder's newest complete one
    (``log`` says which newer ones it passed over, and why)."""
    from fastpipe.checkpoint.disk import NAME, checkpoints_in, verify

    if path.is_dir() and not NAME.match(path.name):
        found = [p for p in checkpoints_in(path / "checkpoints") or checkpoints_in(path) if p.is_dir()]
        for candidate in found:
            problem = verify(candidate)
            if problem is None:
                return candidate
            log(f"{candidate} is not a complete checkpoint ({problem}); passing over it to an older one")
        raise DataError(f"{path} holds no complete sharded checkpoint (step-*.dcp folder with a matching "
                        "sidecar); give a run of launcher=fsdp with train.checkpoint_every set")
    if not path.is_dir():
        raise ConfigError(f"{path} is not a sharded checkpoint folder (step-*.dcp) or a run folder"
                          + ("; a .pt checkpoint is one file already: torch.load it" if path.is_file() else ""))
    problem = verify(path)
    if problem is not None:
        raise DataError(f"{path} is not a complete checkpoint: {problem}; consolidate an older one beside it")
    return path


class Consolidated(NamedTuple):
    path: Path  # the weights file written
    source: Path  # the sharded checkpoint it came from
    step: int  # the training step of those weights


def consolidate(checkpoint: Path, out: Path, log: Callable[[str], None] = say) -> Consolidated:
    """Write the model weights of the sharded ``checkpoint`` to ``out`` (a weights file)."""
    from fastpipe.checkpoint.dcp import read_weights
    from fastpipe.checkpoint.disk import load_state, write_checkpoint

    if out.suffix != ".pt":
        raise ConfigError(f"{out}: the output must be a .pt file")
    source = sharded_checkpoint(checkpoint, log)
    train_state = load_state(source)
    meta = train_state.get("meta", {})
    weights = {"format": "weights", "which": "consolidated", "step": train_state["position"]["step"],
               "metric": None, "model": read_weights(source), "raw_model": None, "weights": "raw",
               "source": str(source), "meta": {k: meta.get(k) for k in ("model", "model_kwargs", "dataset", "task")}}
    out.parent.mkdir(parents=True, exist_ok=True)
    return Consolidated(write_checkpoint(out.parent, weights, name=out.stem), source, weights["step"])


def main(argv: Optional[List[str]] = None) -> int:
    doc = __doc__.split("\n\n")
    p = argparse.ArgumentParser(prog="python -m fastpipe.consolidate", description=doc[0].split(": ", 1)[1],
                                epilog="\n\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="a step-*.dcp folder, or a run folder (its newest complete one)")
    p.add_argument("out", type=Path, help="the .pt file to write")
    args = p.parse_args(argv)
    try:
        done = consolidate(args.checkpoint, args.out)
    except FastpipeError as exc:
        print(f"fastpipe.consolidate: error: {exc}", file=sys.stderr)
        return EXIT_CODE
    print(f"fastpipe.consolidate: wrote {done.path} (and its sidecar {done.path.with_suffix('.json').name}) from "
          f"{done.source}, the weights of step {done.step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
