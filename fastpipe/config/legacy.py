"""Old spellings that still work, each with a warning naming the new one.

``_target_`` paths of modules that moved into packages (``fastpipe.tasks.Classification`` is now
``fastpipe.stages.tasks.Classification``): a project's config, or a finished run's
``.hydra/config.yaml`` read back by ``fastpipe.load``, keeps working.
"""
from __future__ import annotations

from typing import Optional, Tuple

MOVED_TARGET_MODULES = {"fastpipe.tasks": "fastpipe.stages.tasks", "fastpipe.schedules": "fastpipe.stages.schedules"}


def moved_target(key: str, target: str) -> Tuple[str, Optional[str]]:
    """``target`` at its current path, and the warning when it was spelled the old way (else None)."""
    module, _, name = target.rpartition(".")
    new = MOVED_TARGET_MODULES.get(module)
    if new is None:
        return target, None
    return f"{new}.{name}", (f"{key}={target} is deprecated: use {key}={new}.{name} (the module moved; the old path "
                             "will be removed in the next release)")
