"""``python -m fastpipe.doctor``: is this machine ready to train, and what can its hardware do?

Reports torch, CUDA, cuDNN and driver versions, each GPU with its memory, NCCL, DALI, Hydra and
OmegaConf, whether the CPU computes bf16 natively, the TF32 switches, whether fastpipe's configs
compose (as ``python -m fastpipe`` composes them) and a tiny torch.compile smoke test. Exits 1 when
something required is broken (listed under "problems"), 0 otherwise; optional things that are
missing are "notes": among them each package a registered choice or logger declares it needs
(config/registry.py's ``Requirement``), which ``--require EXTRA`` makes required.
``--json`` prints the same as JSON; ``--bench`` adds the hardware ceilings (fastpipe/measure/bench.py).
"""
from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import platform
import sys
from typing import Dict, Optional

import torch

from fastpipe.cli.probes import (SWEEP_PLUGINS, compile_smoke, config_composes, dali, driver_version, gpus, nccl,
                                 sweep_plugins, tf32)
from fastpipe.config.logger import logger_class, logger_names
from fastpipe.config.registry import Requirement
from fastpipe.config.registry import requirements as choice_requirements
from fastpipe.machine import cpu_bf16, nvml_gpu_count
from fastpipe.runtime import drop_no_cuda_runtime_note

REQUIRED_RANGES = {"hydra-core": ("1.3.2", "1.4"), "omegaconf": ("2.3", "2.4")}  # pyproject's pins
MACHINE = ("cuda", "nccl", "compile")  # what --require can make mandatory, beside the packages choices need


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _as_tuple(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("+")[0].split(".")[:3])


def requirements() -> Dict[str, Requirement]:
    """``{"data=dali": Requirement}``: the packages fastpipe's registered choices and loggers need beyond
    its own dependencies (each choice's registration, each logger class's ``requires``)."""
    import fastpipe.config  # noqa: F401  (registers fastpipe's own choices)

    found = choice_requirements()
    for name in logger_names():
        declared = getattr(logger_class(name), "requires", None)
        if declared:
            found[f"logger={name}"] = Requirement(*declared)
    return found


def optional_choices() -> tuple:
    """What ``--require`` takes: the machine's parts, then each required package's extra (``dali``, ``fp8``)."""
    return MACHINE + tuple(dict.fromkeys(r.extra for r in requirements().values()))


def package_notes(dali_info: dict) -> Dict[str, Optional[str]]:
    """``{extra: note, or None when fine}`` for each package a registered choice or logger needs: not
    installed; DALI, which the report imports, also installed but not importing."""
    notes: Dict[str, Optional[str]] = {}
    for who, needed in requirements().items():
        notes[needed.extra] = notes.get(needed.extra) or (None if needed.installed() else needed.missing_text(who))
    if dali_info["installed"] and not dali_info["version"]:
        notes["dali"] = f"DALI is installed but does not import ({dali_info['error']})"
    return notes


def diagnose(compile_backend: str = "inductor", require=()) -> dict:
    """Everything the doctor checks; ``problems`` lists what is broken (required), ``notes`` the rest."""
    cuda = torch.cuda.is_available()
    report = {
        "python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
        "torchvision": _version("torchvision"), "cuda_build": torch.version.cuda, "cuda_available": cuda,
        "driver": driver_version(), "cudnn": torch.backends.cudnn.version() if cuda else None, "gpus": gpus(),
        "nccl": nccl(), "dali": dali(), "hydra": _version("hydra-core"), "omegaconf": _version("omegaconf"),
        "cpu_bf16": cpu_bf16(), "sweep_plugins": sweep_plugins(), "tf32": tf32(), "compile": compile_smoke(compile_backend, "cuda" if cuda else "cpu"),
        "problems": [], "notes": []}
    problems, notes = report["problems"], report["notes"]
    for dist, (low, high) in REQUIRED_RANGES.items():
        have = report["hydra" if dist == "hydra-core" else "omegaconf"]
        if have is None or not _as_tuple(low) <= _as_tuple(have) < _as_tuple(high):
            problems.append(f"{dist} {have or 'is not installed'}: fastpipe needs >={low},<{high}")
    if report["torchvision"] is None:
        problems.append("torchvision is not installed: pip install torchvision (the version matching torch)")
    broken_conf = config_composes()
    if broken_conf:
        problems.append(f"fastpipe's configs do not compose ({broken_conf}): reinstall fastpipe")
    seen = nvml_gpu_count()
    if seen and not cuda:
        problems.append(f"the driver sees {seen} GPU(s) but torch cannot use CUDA (torch {torch.__version__}, "
                        f"CUDA build {torch.version.cuda}): install a CUDA build of torch that this driver supports")
    optional = {
        "cuda": None if cuda else "no CUDA device: training runs on the CPU (device=auto)",
        "nccl": None if report["nccl"]["available"] else "NCCL unavailable: launcher=ddp uses gloo",
        "compile": None if report["compile"]["ok"] else (
            f"torch.compile smoke test failed ({report['compile']['error']}): compile=* falls back to eager"),
        **package_notes(report["dali"]),
    }
    missing = [c for c in SWEEP_PLUGINS if c not in report["sweep_plugins"]]
    if missing:  # fastpipe's own entry point registers them; other Hydra apps need the scan
        notes.append(f"Hydra's plugin scan does not find {' and '.join(missing)} (an editable install made with an "
                     "older fastpipe?): Hydra apps other than fastpipe cannot use them; reinstall fastpipe with "
                     "the README's install command")
    bf16 = report["cpu_bf16"]
    if bf16["native"] is False and not cuda:  # training runs on this CPU
        notes.append(f"this CPU has no native bf16 (no {' or '.join(bf16['looked_for'])}): precision=amp (bf16 "
                     "autocast) runs emulated and much slower than fp32 here; use precision=fp32 on this machine")
    for name, message in optional.items():
        if message:
            (problems if name in require else notes).append(message)
    report["ok"] = not problems
    return report


def format_report(r: dict) -> str:
    """The human-readable report."""
    rows = [("python", r["python"]), ("torch", f"{r['torch']}  (CUDA build {r['cuda_build']})"),
            ("torchvision", r["torchvision"]), ("driver", r["driver"] or "none (no NVML)"),
            ("cuDNN", r["cudnn"] or "n/a"), ("CUDA", "available" if r["cuda_available"] else "not available")]
    rows += [(f"GPU {g['index']}", f"{g['name']}  {g['memory_gb']} GiB  sm_{g['capability'].replace('.', '')}")
             for g in r["gpus"]]
    n, d, c = r["nccl"], r["dali"], r["compile"]
    nccl_text = f"yes {n['version'] or ''}" if n["available"] else "no"
    rows += [("NCCL", f"{nccl_text}   gloo {'yes' if n['gloo'] else 'no'}"),
             ("DALI", d["version"] or ("import fails" if d["installed"] else "not installed")),
             ("Hydra", r["hydra"]), ("OmegaConf", r["omegaconf"]),
             ("CPU bf16", _bf16_text(r["cpu_bf16"])),
             ("plugins", ", ".join(r["sweep_plugins"]) + " (found by Hydra's plugin scan)" if r["sweep_plugins"]
              else "not found by Hydra's plugin scan"),
             ("TF32", f"matmul {r['tf32']['matmul']}  cudnn {r['tf32']['cudnn']}  "
                      f"float32_matmul_precision={r['tf32']['float32_matmul_precision']}"),
             ("compile", f"{'ok' if c['ok'] else 'FAILED'}  backend={c['backend']} on {c['device']} "
                         f"in {c['seconds']} s")]
    lines = ["fastpipe doctor"] + [f"  {k:<12} {v}" for k, v in rows]
    for b in r.get("bench", {}).get("results", []):
        lines.append(f"  {'bench':<12} {b['label']}: {b['value']:.4g} {b['unit']}")
    lines += [f"  problem      {p}" for p in r["problems"]] + [f"  note         {n}" for n in r["notes"]]
    lines.append("  status       " + ("ok" if r["ok"] else "BROKEN (see problems)"))
    return "\n".join(lines)


def _bf16_text(b: dict) -> str:
    if b["native"] is None:
        return "unknown (this CPU's features cannot be read)"
    if b["native"]:
        return f"native ({', '.join(b['isa'])})"
    return f"emulated (no {' or '.join(b['looked_for'])}): precision=amp is slow on this CPU"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fastpipe.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--bench", action="store_true", help="also measure matmul TFLOP/s and copy GB/s")
    parser.add_argument("--size", type=int, default=None, help="bench matmul size N (default 8192 GPU, 1024 CPU)")
    parser.add_argument("--copy-mb", type=int, default=None, help="bench copy size in MiB (default 1024 GPU, 64 CPU)")
    parser.add_argument("--repeats", type=int, default=10, help="bench: timed repeats (median is reported)")
    parser.add_argument("--compile-backend", default="inductor", help="backend of the compile smoke test")
    parser.add_argument("--require", action="append", default=[], choices=optional_choices(),
                        help="treat this optional component (or the package of this extra) as required (repeatable)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():  # the report says so itself, not torch's CUDA_HOME line
        drop_no_cuda_runtime_note()
    report = diagnose(args.compile_backend, set(args.require))
    if args.bench:
        from fastpipe.measure.bench import run_bench

        report["bench"] = run_bench(args.size, args.copy_mb, args.repeats)
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
