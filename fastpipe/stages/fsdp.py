"""launcher=fsdp: the model sharded over the processes by PyTorch's FSDP2 (``fully_shard``).

The model is built on the meta device (no memory), its blocks become FSDP units (each all-gathers
its parameters just before it runs and reduce-scatters its gradients after), the root is sharded
last, and only then are the parameters allocated (``to_empty``) and initialised, each process
holding its shard: a model larger than one GPU never exists whole. ``precision=amp`` gives FSDP2's
MixedPrecisionPolicy (parameters gathered in bf16/fp16, gradients reduced in fp32).
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import List, Optional

import torch
from torch import nn

from fastpipe.config import FsdpLauncherConfig
from fastpipe.errors import ConfigError, EnvironmentProblem
from fastpipe.models import repeated_blocks

MIN_TORCH = (2, 6)  # the public torch.distributed.fsdp.fully_shard


def require_fsdp2() -> None:
    """One line when this torch has no public FSDP2."""
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < MIN_TORCH:
        raise EnvironmentProblem(f"launcher=fsdp needs torch >= 2.6 (FSDP2's public fully_shard); this is torch "
                                 f"{torch.__version__}: upgrade torch, or use launcher=ddp")


def units(model: nn.Module, rule) -> List[nn.Module]:
    """The modules that become FSDP units: ``launcher.shard`` class names, or the repeated blocks."""
    if rule == "auto":
        found = repeated_blocks(model)
        if not found:
            raise ConfigError(f"launcher=fsdp found no repeated blocks in {type(model).__name__} (modules of an "
                              "nn.ModuleList, or blocks of top-level nn.Sequential stages); name the classes to "
                              "shard: launcher.shard=[ClassName]")
        return found
    wanted = set(rule)
    found = [m for m in model.modules() if type(m).__name__ in wanted and m is not model]
    missing = wanted - {type(m).__name__ for m in found}
    if missing:
        present = sorted({type(m).__name__ for m in model.modules()})
        raise ConfigError(f"launcher.shard names {sorted(missing)}, which {type(model).__name__} has no module of "
                          f"(its classes: {', '.join(present[:12])}); fix the names, or use launcher.shard=auto")
    nested = {id(sub) for m in found for sub in m.modules() if sub is not m}
    return [m for m in found if id(m) not in nested]  # a unit inside another unit would be gathered twice


def mixed_precision(amp_dtype: Optional[torch.dtype]):
    """FSDP2's policy for ``precision=amp``: parameters gathered (and the forward run) in the amp dtype,
    gradients reduced in fp32; fp32: None. (``shard`` adds fp32 outputs at the root, for the loss.)"""
    if amp_dtype is None:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=amp_dtype, reduce_dtype=torch.float32)


RESETS = ("reset_parameters", "_reset_parameters")  # nn.MultiheadAttention's is private


def init_weights(model: nn.Module) -> str:
    """Initialise the materialised (sharded) parameters: the model's own ``init_weights()`` when it has
    one (a GPT's scaled init), else every submodule's ``reset_parameters()``; returns which. Without
    ``init_weights()``, a parameter or buffer of a module with no reset of its own would train from
    whatever memory held: refused, naming them."""
    with torch.no_grad():
        if callable(getattr(model, "init_weights", None)):
            model.init_weights()
            return f"{type(model).__name__.removeprefix('FSDP')}.init_weights"
        unset = [f"{name}.{key}".lstrip(".") for name, module in model.named_modules()
                 if not any(callable(getattr(module, r, None)) for r in RESETS)
                 for key in list(module._parameters) + list(module._buffers)
                 if getattr(module, key, None) is not None]
        if unset:
            raise ConfigError(f"launcher=fsdp builds model={type(model).__name__.removeprefix('FSDP')} on the meta "
                              f"device and initialises each module with its reset_parameters(), but "
                              f"{', '.join(unset[:4])}{' ...' if len(unset) > 4 else ''} belong to modules without "
                              "one: give the model an init_weights() method that initialises every parameter and "
                              "buffer (as fastpipe's GPT has), or use launcher=ddp")
        for module in model.modules():
            reset = next((getattr(module, r) for r in RESETS if callable(getattr(module, r, None))), None)
            if reset is not None:
                reset()
    return "each module's reset_parameters"


def _tied_groups(model: nn.Module) -> List[List[str]]:
    """Names of parameters that are one tensor (a GPT's tied embedding and head), per tensor."""
    by_tensor = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(p), []).append(name)
    return [names for names in by_tensor.values() if len(names) > 1]


def shard(model: nn.Module, blocks: List[nn.Module], cfg: FsdpLauncherConfig, device: torch.device, policy) -> str:
    """Make ``blocks`` FSDP2 units and ``model`` (built on the meta device) the root, allocate the shards
    on ``device`` and initialise them; returns graph.txt's line. On CUDA, DTensor's random ops draw
    each shard as its part of the whole tensor, so the initialisation is the same for any number of
    ranks; elsewhere each rank draws its shard from its own (seeded) generator."""
    from torch.distributed.fsdp import fully_shard

    options = {"reshard_after_forward": cfg.reshard_after_forward}
    if policy is not None:
        options["mp_policy"] = policy
    for block in blocks:
        fully_shard(block, **options)
    if policy is not None:  # the model's outputs (not each block's: the next one takes bf16) back in fp32
        options["mp_policy"] = dataclasses.replace(policy, output_dtype=torch.float32)
    fully_shard(model, **options)
    tied = _tied_groups(model)
    model.to_empty(device=device)
    for names in tied:  # fully_shard keeps one sharded parameter per tied group; a torch that did not would
        first = model.get_parameter(names[0])  # train the copies apart
        if any(model.get_parameter(n) is not first for n in names[1:]):
            raise EnvironmentProblem(f"materialising the sharded model untied {names} in this torch "
                                     f"{torch.__version__}: untie them in the model, or use launcher=ddp")
    with warnings.catch_warnings():  # on a CPU mesh DTensor warns that its random ops are per rank (see above)
        warnings.filterwarnings("ignore", message="DTensor random operators")
        how = init_weights(model)
    kinds = sorted({type(b).__name__.removeprefix("FSDP") for b in blocks})  # the blocks, not their wrappers
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    mp = "" if policy is None else f"  mixed precision: gathered {policy.param_dtype}, reduced {policy.reduce_dtype}"
    return (f"FSDP2  {len(blocks)} units ({', '.join(kinds)}) + root  reshard_after_forward="
            f"{cfg.reshard_after_forward}{mp}  {local / 1e6:.2f}M parameters on this rank  init: {how}")
