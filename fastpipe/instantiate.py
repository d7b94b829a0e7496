"""Objects a project names by ``_target_``: import, check against the callable's signature, instantiate.

Configs are code: a ``_target_`` can name any importable callable (``os.system`` included), exactly
as in Hydra itself, so keep configs out of untrusted hands (docs/configuration.md).

The working folder is importable (a project runs ``python -m fastpipe`` from its own folder). Keys
fastpipe supplies at run time (a model's ``num_classes``, an optimizer's parameters) are passed only
when the callable accepts them and the config leaves them unset (absent, or null).
"""
from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional

from fastpipe.errors import ConfigError, FastpipeError

HYDRA_KEYS = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")


def _importable_cwd() -> None:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.append(cwd)


def import_target(key: str, target: Any) -> Callable:
    """The callable ``target`` names (``pkg.module.Name``); one clear line naming ``key`` if it fails."""
    if not isinstance(target, str) or "." not in target.strip("."):
        raise ConfigError(f"{key}={target!r} is not a dotted path; use e.g. mypkg.models.Net")
    _importable_cwd()
    module_name, _, attr = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{key}={target!r} cannot be imported ({type(exc).__name__}: {exc}); check the "
                          "name, and that its module is on PYTHONPATH or in the working folder") from exc
    if not callable(obj):
        raise ConfigError(f"{key}={target!r} is a {type(obj).__name__}, not a class or function")
    return obj


def parameters(fn: Callable) -> Optional[Dict[str, inspect.Parameter]]:
    """The callable's named parameters, or None when it takes ``**kwargs`` (or has no signature)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return {name: p for name, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY)}


def accepts(fn: Callable, name: str) -> bool:
    """True when ``fn`` takes a keyword ``name`` (or any keyword)."""
    params = parameters(fn)
    return params is None or name in params


def check_params(group: str, fn: Callable, target: str, params: Dict[str, Any],
                 supplied: Iterable[str] = ()) -> None:
    """Refuse keys ``fn`` does not take and required arguments nobody gives, naming the key.

    ``supplied`` are the keywords fastpipe passes at run time; a ``_partial_`` object may leave
    required arguments to its caller.
    """
    names = parameters(fn)
    if names is None:
        return
    given = [k for k in params if k not in HYDRA_KEYS]
    unknown = [k for k in given if k not in names]
    if unknown:
        takes = ", ".join(n for n in names if n != "self") or "no keyword arguments"
        raise ConfigError(f"{group}.{unknown[0]} is not a parameter of {target} (it takes: {takes}); "
                          f"fix the key, or remove it from the {group} config")
    if params.get("_partial_"):
        return
    missing = [n for n, p in names.items() if p.default is p.empty and n not in given and n not in supplied
               and n != "self"]
    if missing:
        raise ConfigError(f"{group}: {target} needs the argument {missing[0]!r}; add {group}.{missing[0]}=VALUE")


def _failed(group: str, target: str, keys: Dict[str, Any], cause: BaseException) -> ConfigError:
    given = ", ".join(f"{group}.{k}={v!r}" for k, v in keys.items() if k not in HYDRA_KEYS)[:300]
    return ConfigError(f"{group}._target_={target!r} failed: {type(cause).__name__}: {cause}"
                       + (f" (its keys: {given})" if given else ""))


def call_partial(group: str, target: str, keys: Dict[str, Any], made, *args, **kwargs):
    """Call a ``_partial_`` object's factory; its errors (a bad value) name the group and its keys."""
    try:
        return made(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise _failed(group, target, keys, exc) from exc


def instantiate(group: str, target: str, keys: Dict[str, Any], /, **runtime_kwargs):
    """``hydra.utils.instantiate`` of ``{_target_: target, **keys}``; ``runtime_kwargs`` are passed
    when the callable accepts them and the config does not set them. Errors name the group."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate as hydra_instantiate

    fn = import_target(f"{group}._target_", target)
    # A runtime keyword the config leaves unset (absent or null, e.g. a GPT's seq_len) comes from fastpipe.
    extra = {k: v for k, v in runtime_kwargs.items() if keys.get(k) is None and accepts(fn, k)}
    try:
        return hydra_instantiate({"_target_": target, **keys}, **extra)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, FastpipeError):
            raise cause from None  # the callable's own clear message (e.g. a missing dataset folder)
        raise _failed(group, target, keys, cause if cause is not None else exc) from exc
