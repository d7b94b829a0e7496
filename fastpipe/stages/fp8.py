"""precision=fp8: the model's Linear layers swapped for torchao's ``Float8Linear`` (float8 training).

Which layers: ``precision.fp8_layers=auto`` takes every ``nn.Linear`` whose weight's dimensions are
multiples of 16 (what fp8 tensor-core matmuls take) and whose weight no other module shares (a GPT's
head tied to its token embedding stays bf16, as torchtitan's filter and fp8 hand loops keep it); a
list names the layers instead. The swap runs on the bare model before activation checkpointing,
data-parallel wrapping, FSDP sharding and compilation, so names are the model's own and FSDP shards
the fp8 layers (their weights cast to float8 before the all-gather where torchao supports it:
recipe=tensorwise). On the CPU torchao's emulation runs the same casts in high-precision matmuls.
"""
from __future__ import annotations

import dataclasses
import re
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import torch
from torch import nn

from fastpipe.config import Fp8PrecisionConfig
from fastpipe.errors import ConfigError, EnvironmentProblem, FastpipeWarning

MIN_CAPABILITY = (8, 9)  # fp8 tensor cores: Ada (8.9), Hopper (9.0) and newer
MULTIPLE = 16  # torch._scaled_mm's alignment for both dimensions of the weight
LOW_SHARE = 0.5  # below this share of the parameters in fp8 layers, fp8 rarely pays: say so


@dataclass
class Fp8Layers:
    """What was converted, for graph.txt and metrics.json."""

    recipe: str
    converted: List[str]
    kept: Dict[str, str] = field(default_factory=dict)  # Linear layers left in bf16, and why
    emulated: bool = False
    fsdp_all_gather: bool = False
    share: float = 0.0  # the converted layers' share of the model's parameters

    def describe(self, by_fsdp: bool = False) -> str:
        how = "emulated on the CPU" if self.emulated else "fp8 tensor cores"
        kept = "; ".join(f"{name} ({why})" for name, why in self.kept.items())
        rest = "the rest in bf16 by FSDP2's MixedPrecisionPolicy (no autocast)" if by_fsdp else \
            "bf16 autocast around the rest"
        gather = "; weights all-gathered in fp8" if self.fsdp_all_gather else ""
        return (f"fp8  torchao float8 training, recipe={self.recipe} ({how}) on {len(self.converted)} Linear layers "
                f"({100 * self.share:.0f} % of the parameters): {compact_names(self.converted)}"
                f"{f'; kept in bf16: {kept}' if kept else ''}; {rest}{gather}; MFU counted against the bf16 peak")

    def record(self) -> dict:
        return {"recipe": self.recipe, "converted": list(self.converted), "kept": dict(self.kept),
                "emulated": self.emulated, "fsdp_all_gather": self.fsdp_all_gather, "share": round(self.share, 4)}


def require_fp8_device(device: torch.device) -> bool:
    """True when fp8 must be emulated (the CPU); one line when this GPU has no fp8 tensor cores."""
    if device.type == "cpu":
        return True
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise EnvironmentProblem(f"precision=fp8 needs fp8 tensor cores (compute capability >= 8.9: Ada, Hopper "
                                 f"or newer); {name} has {capability[0]}.{capability[1]}: use precision=amp")
    return False


def _torchao():
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as exc:  # absent, or built for another torch
        raise EnvironmentProblem(f"precision=fp8 needs torchao's float8 training, which does not import here "
                                 f"({type(exc).__name__}: {exc}); pip install 'fastpipe[fp8]' (torchao 0.17 with "
                                 f"torch {torch.__version__}), or use precision=amp") from exc
    return Float8LinearConfig, convert_to_float8_training


def candidates(model: nn.Module) -> Tuple[List[str], Dict[str, str]]:
    """(the Linear layers fp8 can take, {each other Linear layer: why not}), by module name."""
    shared: Dict[int, List[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        shared.setdefault(id(p), []).append(name)
    # nn.MultiheadAttention reads its out_proj's weight in F.multi_head_attention_forward, never calling
    # the Linear: a Float8Linear there would be listed as converted and still run in bf16.
    inside_attention = {f"{name}.{child}".lstrip(".") for name, module in model.named_modules()
                        if isinstance(module, nn.MultiheadAttention) for child, _ in module.named_children()}
    usable, refused = [], {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        out_features, in_features = module.weight.shape
        others = [n for n in shared.get(id(module.weight), []) if n != f"{name}.weight"]
        if name in inside_attention:
            refused[name] = "inside nn.MultiheadAttention, which never calls it (its weights stay bf16)"
        elif others:
            refused[name] = f"weight tied to {others[0]}"
        elif out_features % MULTIPLE or in_features % MULTIPLE:
            refused[name] = f"{out_features}x{in_features}: not multiples of {MULTIPLE}"
        else:
            usable.append(name)
    return usable, refused


def _chosen(model: nn.Module, cfg: Fp8PrecisionConfig) -> Tuple[List[str], Dict[str, str]]:
    usable, refused = candidates(model)
    if cfg.fp8_layers == "auto":
        if not usable:
            linears = f"its Linear layers: {'; '.join(f'{n} ({w})' for n, w in refused.items())}" if refused \
                else "it has no nn.Linear layer"
            raise ConfigError(f"precision=fp8 found no layer of {type(model).__name__} to run in fp8 (fp8 replaces "
                              f"untied nn.Linear layers whose dimensions are multiples of {MULTIPLE}; {linears}); "
                              "use precision=amp")
        return usable, refused
    wanted = list(dict.fromkeys(cfg.fp8_layers))
    for name in wanted:
        if name in refused:
            raise ConfigError(f"precision.fp8_layers names {name}, which fp8 cannot take ({refused[name]}); drop it")
        if name not in usable:
            shown = ", ".join(usable[:8]) + (", ..." if len(usable) > 8 else "")
            raise ConfigError(f"precision.fp8_layers names {name}, which is not an nn.Linear of "
                              f"{type(model).__name__} (its fp8-capable layers: {shown or 'none'}); fix the name, "
                              "or use precision.fp8_layers=auto")
    kept = {**{n: "not in precision.fp8_layers" for n in usable if n not in wanted}, **refused}
    return wanted, kept


def convert_fp8(model: nn.Module, cfg: Fp8PrecisionConfig, device: torch.device, by_fsdp: bool = False) -> Fp8Layers:
    """Swap ``model``'s chosen Linear layers (in place) for torchao's Float8Linear per ``cfg``."""
    emulated = require_fp8_device(device)
    Float8LinearConfig, convert_to_float8_training = _torchao()
    chosen, kept = _chosen(model, cfg)
    gather = by_fsdp and cfg.fsdp_all_gather()
    options = dataclasses.replace(Float8LinearConfig.from_recipe_name(cfg.recipe), emulate=emulated,
                                  enable_fsdp_float8_all_gather=gather)
    wanted = set(chosen)
    total = sum(p.numel() for p in model.parameters())
    share = sum(model.get_submodule(n).weight.numel() for n in chosen) / max(1, total)
    convert_to_float8_training(model, config=options, module_filter_fn=lambda module, name: name in wanted)
    if emulated:
        warnings.warn("precision=fp8 on the CPU runs torchao's emulation of the fp8 casts in high-precision "
                      "matmuls: slower than bf16, for tests and debugging only", FastpipeWarning)
    if share < LOW_SHARE:
        warnings.warn(f"precision=fp8 converts only {100 * share:.0f} % of {type(model).__name__}'s parameters (its "
                      "other layers, e.g. convolutions and embeddings, stay bf16): fp8 pays on large matmuls; compare "
                      "with precision=amp", FastpipeWarning)
    return Fp8Layers(cfg.recipe, chosen, kept, emulated, gather, share)


def compact_names(names: List[str]) -> str:
    """``blocks.0.mlp.0, blocks.1.mlp.0, ...`` as ``blocks.[0-1].mlp.0``: names that differ only in their
    first number are listed once, with the numbers' ranges."""
    groups: Dict[str, List[int]] = {}  # in first-seen order
    for name in names:
        match = re.search(r"(?:^|\.)(\d+)(?:\.|$)", name)
        key = name if match is None else name[:match.start(1)] + "{}" + name[match.end(1):]
        groups.setdefault(key, [])
        if match is not None:
            groups[key].append(int(match.group(1)))
    return ", ".join(key.replace("{}", _ranges(numbers)) if numbers else key for key, numbers in groups.items())


def _ranges(numbers: List[int]) -> str:
    """[0, 1, 2, 5] -> "[0-2,5]"; a single number as itself."""
    numbers = sorted(set(numbers))
    if len(numbers) == 1:
        return str(numbers[0])
    spans, start = [], numbers[0]
    for previous, current in zip(numbers, numbers[1:] + [None]):
        if current is None or current != previous + 1:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
            start = current
    return "[" + ",".join(spans) + "]"
