"""``python -m fastpipe.doctor``: is this machine ready to train, and what can its hardware do?

Reports torch, CUDA, cuDNN and driver versions, each GPU with its memory, NCCL, DALI, Hydra and
OmegaConf, whether the CPU computes bf16 natively, the TF32 switches, whether fastpipe's configs
compose (as ``python -m fastpipe`` composes them) and a tiny torch.compile smoke test. Exits 1 when
something required is broken (listed under "problems"), 0 otherwise; optional things that are
missing are "notes".
``--json`` prints the same as JSON; ``--bench`` adds the hardware ceilings (fastpipe/measure/bench.py).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import json
import platform
import sys
import time
from typing import List, Optional

import torch

from fastpipe.machine import cpu_bf16

REQUIRED_RANGES = {"hydra-core": ("1.3.2", "1.4"), "omegaconf": ("2.3", "2.4")}  # pyproject's pins
OPTIONAL = ("cuda", "nccl", "dali", "compile")  # what --require can make mandatory
SWEEP_PLUGINS = {"hydra/launcher=gpus": "GpusLauncher", "hydra/sweeper=halving": "HalvingSweeper"}


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _as_tuple(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("+")[0].split(".")[:3])


def driver_version() -> Optional[str]:
    """The NVIDIA driver's version from NVML; None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML library or no driver
        return None


def nvml_gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


def gpus() -> List[dict]:
    """Every GPU torch can use, with its memory and compute capability."""
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": p.name, "memory_gb": round(p.total_memory / 2**30, 1),
                    "capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count})
    return out


def nccl() -> dict:
    available = torch.distributed.is_available() and torch.distributed.is_nccl_available()
    version = None
    if available and torch.cuda.is_available():
        raw = torch.cuda.nccl.version()
        version = ".".join(map(str, raw)) if isinstance(raw, tuple) else str(raw)
    return {"available": bool(available), "version": version,
            "gloo": bool(torch.distributed.is_available() and torch.distributed.is_gloo_available())}


def dali() -> dict:
    """DALI's distribution and whether it imports (it may be installed for another CUDA)."""
    dists = sorted(d.metadata["Name"] for d in metadata.distributions()
                   if (d.metadata["Name"] or "").lower().startswith("nvidia-dali"))
    info = {"installed": bool(dists), "package": dists[0] if dists else None, "version": None, "error": None}
    if dists:
        try:
            info["version"] = importlib.import_module("nvidia.dali").__version__
        except Exception as exc:  # e.g. a CUDA library it needs is missing
            info["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return info


def tf32() -> dict:
    """The process defaults (fastpipe sets them per run: precision=fp32 keeps TF32 off unless precision.tf32)."""
    return {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def compile_smoke(backend: str, device: str) -> dict:
    """torch.compile a tiny function and check its result against eager."""
    def f(x):
        return torch.nn.functional.gelu(x @ x.T) * 2 + 1

    x = torch.randn(16, 16, device=device)
    start = time.perf_counter()
    try:
        torch._dynamo.reset()  # a fresh compile, not a cached one
        ok = torch.allclose(torch.compile(f, backend=backend)(x), f(x), atol=1e-4, rtol=1e-4)
        error = None if ok else "compiled result differs from eager"
    except Exception as exc:
        ok, error = False, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
    return {"ok": bool(ok), "backend": backend, "device": device,
            "seconds": round(time.perf_counter() - start, 2), "error": error}


def config_composes() -> Optional[str]:
    """None when fastpipe's packaged configs compose as ``python -m fastpipe`` composes them (its
    schemas registered first); a broken install fails here."""
    try:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from fastpipe.config import config_dir, register_configs

        register_configs()
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
                compose(config_name="config", return_hydra_config=True)
        finally:
            GlobalHydra.instance().clear()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def sweep_plugins() -> List[str]:
    """fastpipe's Hydra plugins that Hydra's own plugin scan finds, as any Hydra app would."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher
    from hydra.plugins.sweeper import Sweeper

    found = {c.__name__ for c in Plugins.instance().discover(Launcher) + Plugins.instance().discover(Sweeper)}
    return [choice for choice, name in SWEEP_PLUGINS.items() if name in found]


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
        "dali": None if report["dali"]["version"] else (
            f"DALI is installed but does not import ({report['dali']['error']})" if report["dali"]["installed"]
            else 'DALI is not installed: data=dali needs pip install "fastpipe[dali]"'),
        "compile": None if report["compile"]["ok"] else (
            f"torch.compile smoke test failed ({report['compile']['error']}): compile=* falls back to eager"),
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
    parser.add_argument("--require", action="append", default=[], choices=OPTIONAL,
                        help="treat this optional component as required (repeatable)")
    args = parser.parse_args(argv)
    report = diagnose(args.compile_backend, set(args.require))
    if args.bench:
        from fastpipe.measure.bench import run_bench

        report["bench"] = run_bench(args.size, args.copy_mb, args.repeats)
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
