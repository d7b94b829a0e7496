"""fastpipe: declarative, self-measuring PyTorch training pipelines composed from Hydra config groups."""
import time as _time

_IMPORTED_AT = _time.time()  # a command's clock starts here: __main__.clock_started_at says why

__version__ = "0.2.0"


def load(run_dir, which: str = "best", device="cpu"):
    """A finished run's trained model back in your code: ``fastpipe.load(run_dir).model`` (fastpipe/checkpoint/trained.py)."""
    from fastpipe.checkpoint.trained import load as _load

    return _load(run_dir, which, device)
