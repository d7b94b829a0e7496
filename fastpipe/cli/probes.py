"""The doctor's probes: each asks one part of the install or the hardware (the driver, GPUs, NCCL, DALI,
TF32, torch.compile, fastpipe's configs and Hydra plugins) and returns what it found, never raising."""
from __future__ import annotations

import importlib
import importlib.metadata as metadata
import time
from typing import List, Optional

import torch

SWEEP_PLUGINS = {"hydra/launcher=gpus": "GpusLauncher", "hydra/sweeper=halving": "HalvingSweeper"}


def driver_version() -> Optional[str]:
    """The NVIDIA driver's version from NVML; None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML library or no driver
        return None


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
    """Whether torch.distributed has NCCL (and its version, with CUDA) and gloo."""
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
