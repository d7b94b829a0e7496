"""Runtime setup: the one place that reads the environment and sets torch's global switches.

Stages receive the resulting ``Runtime`` (device, process-group position, cache folder) and never
read ``os.environ``, ``torch.backends`` or the process group themselves. torch is imported by the
functions that use it, not with the module: the entry point reads the environment here before it
has imported torch. A run may train in a process that goes on after it (a single run in the process
the user started, a test, a program that calls fastpipe twice): ``process_state_kept`` puts back
everything the run set.
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List

from fastpipe.errors import EnvironmentProblem


@dataclass(frozen=True)
class Dist:
    """This process's place among the training processes (all 0/1 for a single process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # The collectives over these processes (the default process group); each is a no-op for one process.
    def any_rank(self, flag: torch.Tensor) -> torch.Tensor:
        """True on every rank when ``flag`` is true on any (a device-side all-reduce; no host sync)."""
        import torch
        if self.world_size == 1:
            return flag
        flag = flag.to(torch.int32)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return flag.bool()

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks, in place."""
        import torch
        if self.world_size > 1:
            torch.distributed.all_reduce(tensor)
        return tensor

    def gather(self, value) -> list:
        """Every rank's ``value`` (picklable), in rank order; ``[value]`` for one process."""
        return gather_objects(value, self.world_size)


@dataclass
class Runtime:
    device: torch.device
    dist: Dist
    cache_root: Path
    cpu_cores: int = 1  # the cores this process may run on (shared by the ranks of this machine)

    @property
    def cores_per_process(self) -> int:
        """This process's share of the machine's cores (loader workers, decode threads)."""
        return max(1, self.cpu_cores // max(1, self.dist.local_world_size))

    def describe(self, seed: int, cudnn_benchmark: bool, channels_last: bool) -> str:
        """graph.txt's runtime line: the device, the processes and the switches ``setup_runtime`` applied."""
        return (f"device={self.device}  world_size={self.dist.world_size}  seed={seed}  "
                f"cudnn.benchmark={cudnn_benchmark}  channels_last={channels_last}")


def dist_from_env() -> Dist:
    """The position torchrun / the elastic agent / srun gave this process (defaults: single)."""
    env = os.environ
    world = int(env.get("WORLD_SIZE", 1))
    return Dist(int(env.get("RANK", 0)), world, int(env.get("LOCAL_RANK", 0)),
                int(env.get("LOCAL_WORLD_SIZE", world)))


def started_by_torchrun() -> bool:
    """True when an external launcher (torchrun, srun with torch env vars) started this process."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def full_errors() -> bool:
    """``HYDRA_FULL_ERROR=1`` (Hydra's own switch): also print the traceback of an error fastpipe
    recognises, which it otherwise reports as one line."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def cache_root() -> Path:
    """Where generated datasets and packs live: $FASTPIPE_CACHE, else ~/.cache/fastpipe."""
    base = os.environ.get("FASTPIPE_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fastpipe"
    return Path(base).expanduser()


def tracker_environment() -> dict:
    """What the trackers read from the environment: ``MLFLOW_TRACKING_URI``, whether MLflow's file store is
    allowed (``MLFLOW_ALLOW_FILE_STORE``), ``WANDB_MODE``, and whether a W&B API key is configured
    (``WANDB_API_KEY``, or a ``wandb login`` entry in ~/.netrc for ``WANDB_BASE_URL``'s host)."""
    import netrc
    from urllib.parse import urlparse

    env = os.environ
    key = bool(env.get("WANDB_API_KEY"))
    if not key:
        host = urlparse(env.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
        try:
            key = netrc.netrc(env.get("NETRC") or None).authenticators(host) is not None
        except (OSError, netrc.NetrcParseError):
            key = False
    return {"mlflow_tracking_uri": env.get("MLFLOW_TRACKING_URI") or None,
            "mlflow_allow_file_store": env.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true", "yes"),
            "wandb_mode": env.get("WANDB_MODE") or None, "wandb_api_key": key}


def bound_tracker_requests(timeout_s: float) -> None:
    """MLflow's HTTP client retries a dead server for minutes by default (7 retries, backoff factor 2,
    120 s per request): unless the user set them, at most 2 retries of ``timeout_s`` each, backoff 1 s."""
    import math

    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0.2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, math.ceil(timeout_s))))


def resolve_device(requested: str, dist: Dist) -> torch.device:
    import torch
    if requested == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", dist.local_rank % torch.cuda.device_count())
    if requested == "cuda":
        raise EnvironmentProblem("device=cuda was asked for but CUDA is not available on this machine "
                                 f"(torch {torch.__version__}, cuda build {torch.version.cuda}); use "
                                 "device=auto or device=cpu, or install a CUDA build of torch")
    return torch.device("cpu")


def process_environment(settings) -> None:
    """What torch reads from the environment at its first CUDA call, set before anything of the run can
    make one (the project's own modules as the config check imports them included): ``runtime.cuda_alloc_conf``
    as ``PYTORCH_CUDA_ALLOC_CONF``, which the CUDA caching allocator reads once, as it initialises."""
    if settings.runtime.cuda_alloc_conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = settings.runtime.cuda_alloc_conf


def setup_runtime(settings) -> Runtime:
    """Apply the allocator, seed, cuDNN and TF32 settings; pick the device. Call once per run, inside
    ``process_state_kept``, which puts each of them back as the run ends."""
    import torch
    process_environment(settings)  # a no-op where the entry point did it already
    dist = dist_from_env()
    device = resolve_device(settings.device, dist)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        drop_no_cuda_runtime_note()
    tf32 = settings.precision.name == "fp32" and settings.precision.tf32
    _undo_later(_switched(torch.backends.cudnn, "benchmark", settings.runtime.cudnn_benchmark))
    _undo_later(_switched(torch.backends.cuda.matmul, "allow_tf32", tf32))  # fp32 means fp32 unless TF32 is allowed
    _undo_later(_switched(torch.backends.cudnn, "allow_tf32", tf32))
    _compiler_switches(settings.compile, settings.precision)
    _undo_later(_generators_restorer())
    seed_everything(settings.seed + dist.rank)  # each rank its own stream (augmentation, dropout)
    if device.type == "cpu" and dist.local_world_size > 1:
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, cpu_cores() // dist.local_world_size))  # ranks share the cores
        _undo_later(lambda: torch.set_num_threads(threads))
    return Runtime(device, dist, cache_root(), cpu_cores())


def quiet_library_info() -> None:
    """torchvision's INFO lines out of the console: a single run trains under Hydra's job logging, which
    prints the root logger's INFO records (torch's own loggers stop theirs at WARNING as torch imports).
    A level set by the user is kept; put back as the job ends."""
    logger = logging.getLogger("torchvision")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
        _undo_later(lambda: logger.setLevel(logging.NOTSET))


_undo: List[List[Callable[[], None]]] = []  # per open ``process_state_kept``: what puts back the run's changes


def _undo_later(action: Callable[[], None]) -> None:
    """``action`` runs as the innermost ``process_state_kept`` ends (nothing to undo outside one)."""
    if _undo:
        _undo[-1].append(action)


def _filtered(logger: logging.Logger, rule) -> Callable[[], None]:
    """``rule`` added to ``logger``'s filters; returns what removes it."""
    logger.addFilter(rule)
    return lambda: logger.removeFilter(rule)


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Around a run: the process-wide state it sets put back as it was before, however the run ends, so
    that a program or a test running fastpipe twice in one process sees no leak from the first run:
    the environment, ``sys.path``, the stop and Ctrl-C signal handlers, and what ``setup_runtime`` and
    ``quiet_library_info`` set (the random generators, torch's cuDNN/TF32 switches and thread count,
    the compiler switches, log filters and levels). A step that cannot be put back is a warning, and
    never hides the run's own error."""
    environ, path = dict(os.environ), list(sys.path)
    main_thread = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1,
                                                       signal.SIGUSR2)} if main_thread else {}
    _undo.append([])
    try:
        yield
    finally:
        def put_back_path() -> None:
            sys.path[:] = path

        def put_back_handlers() -> None:
            for sig, handler in handlers.items():
                if handler is not None:  # None: set outside Python, which cannot be put back
                    signal.signal(sig, handler)

        for step in [*reversed(_undo.pop()), lambda: _put_back_environ(environ), put_back_path, put_back_handlers]:
            try:
                step()
            except Exception as exc:  # the others still run; the run's own outcome stands
                import warnings

                warnings.warn(f"fastpipe could not put back process state after the run: {type(exc).__name__}: "
                              f"{exc}", RuntimeWarning)


def _put_back_environ(environ: dict) -> None:
    for key in set(os.environ) - set(environ):
        del os.environ[key]
    os.environ.update({k: v for k, v in environ.items() if os.environ.get(k) != v})


def _generators_restorer() -> Callable[[], None]:
    """What puts Python's, NumPy's and torch's random generators back as they are now (CUDA's too, once
    initialised)."""
    import numpy as np
    import torch

    python, numpy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore() -> None:
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
    return restore


@contextlib.contextmanager
def autotuning_off() -> Iterator[None]:
    """cuDNN's benchmark mode off for the block: shapes met once (the first-batch check, a batch-size
    probe) are not autotuned, which costs seconds per new shape on a GPU; the run's own shape still is."""
    import torch

    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous


def drop_no_cuda_runtime_note() -> None:
    """Drop torch.utils.cpp_extension's ``No CUDA runtime is found, using CUDA_HOME=...``, which every run
    compiled on a CPU (and the doctor's compile probe) printed where a CUDA toolkit is installed (Inductor's
    C++ builder imports that module): a CPU run builds no CUDA code. That one note only; the module's
    other messages pass. Put back as the job ends."""
    _undo_later(_filtered(logging.getLogger("torch.utils.cpp_extension"),
                          lambda record: not str(record.msg).startswith("No CUDA runtime is found")))


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's (CPU and CUDA) generators from ``seed``."""
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _compiler_switches(cfg, precision=None) -> None:
    """Dynamo's process-wide DDP switch, per ``compile.optimize_ddp`` (compiled autograd is turned on around
    each backward: CompiledModel.backward_context); Inductor's exact rounding of casts for fp8's rowwise
    recipe (without it the fused rowwise scaling can round differently from eager and lose accuracy).
    Each put back as the run ends (``process_state_kept``)."""
    if cfg is None or cfg.name == "off":
        return
    import torch._dynamo.config as dynamo

    if cfg.optimize_ddp != "auto":
        _undo_later(_switched(dynamo, "optimize_ddp", cfg.optimize_ddp))
    if getattr(precision, "name", None) == "fp8" and precision.recipe == "rowwise":
        import torch._inductor.config as inductor

        _undo_later(_switched(inductor, "emulate_precision_casts", True))


def _switched(config, key: str, value) -> Callable[[], None]:
    """``config.key`` set to ``value``; returns what sets it back."""
    before = getattr(config, key)
    setattr(config, key, value)
    return lambda: setattr(config, key, before)


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def gather_objects(value, world_size: int) -> list:
    """Every rank's ``value`` (picklable), in rank order; ``[value]`` for one process."""
    import torch
    if world_size == 1:
        return [value]
    values = [None] * world_size
    torch.distributed.all_gather_object(values, value)
    return values
