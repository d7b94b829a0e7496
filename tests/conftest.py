"""Shared helpers and fixtures: compose fastpipe's configs the way the entry point does, tiny run
settings, runs that several tests read, and the two tiers (tests/unit fast, tests/integration slow)."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fastpipe.config import GROUPS

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
HERE_TESTS = TESTS / "support"  # test-only modules (fault_models, ...) and configs (conf/) live here
CONF_DIR = REPO / "conf"
INTEGRATION = TESTS / "integration"

# Generated datasets and packs go to a per-session cache, inherited by subprocesses too. Under pytest-xdist the
# workers inherit the controller's (its conftest runs first): one cache for the session, shared as DDP ranks share
# one (each dataset and pack is built under a file lock, once).
os.environ.setdefault("FASTPIPE_CACHE", tempfile.mkdtemp(prefix="fastpipe-test-cache-"))
# The test-only modules import by name (model._target_=fault_models.Slow) in this process and in
# every process a test starts, and those processes import this checkout's fastpipe.
sys.path.insert(0, str(HERE_TESTS))
_PATHS = [str(HERE_TESTS), str(REPO)]
os.environ["PYTHONPATH"] = os.pathsep.join(
    _PATHS + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in _PATHS])
# One OpenMP thread in the processes tests start too (one_torch_thread below is this process's): tiny
# models on a shared 2-core machine lose more to spinning threads than they gain from a second one.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A suite started as a background job (``pytest &`` in a script, as a CI step may be) inherits SIGINT ignored,
# as POSIX has it for jobs without job control, and so would every run a test starts: such a run never hears
# the Ctrl-C the SIGINT tests send it. A handler here is reset to the default in every process started after.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration (processes, command lines, sweeps, compilation) is slow:
    ``-m "not slow"`` runs the unit tier."""
    for item in items:
        if INTEGRATION in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.slow)


def computed_once(tmp_path_factory, name, make):
    """``make(folder)``'s result (JSON), computed once per test session: under pytest-xdist (pyproject's
    addopts) each worker has its own session fixtures, so the first worker to ask computes into a folder
    all workers share, under a file lock, and the others wait for it and read what it wrote."""
    import json

    from fastpipe.files import file_lock

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # this run's pytest-N, above every worker's own folder
    folder, result = shared / name, shared / f"{name}.json"
    with file_lock(shared / f"{name}.lock"):
        if not result.exists():
            folder.mkdir()
            result.write_text(json.dumps(make(folder)))
    return json.loads(result.read_text())


# Small and fast: a few hundred 16x16 images, few steps, short windows, no progress bar.
TINY = [
    "dataset.num_images=240", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=12",
    "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0",
]


_COMPOSITIONS = {}  # the structural overrides -> the composed DictConfig


def _structural(override: str) -> bool:
    """Whether ``override`` can change what Hydra composes (a group's choice, ``+experiment=...``, the search
    path) rather than set a value in the composed config (``dataset.num_images=240``, ``+model.hold=F``)."""
    key = override.split("=", 1)[0].lstrip("+~")
    return "." not in key or key.startswith("hydra") or "@" in key or "/" in key


def compose(overrides=()):
    """The composed DictConfig for ``overrides`` (Hydra's compose API over the repo's conf/), each call a copy
    of its own. Hydra composes in two steps, the defaults list from the structural overrides, then the value
    overrides applied to the result (``ConfigLoaderImpl._apply_overrides_to_config``); here the first step
    is done once per test process for each set of structural overrides (it reads conf/'s YAML files anew
    every time: 0.1-0.3 s, in hundreds of tests) and the second by Hydra's own function on a copy.
    Converting the result (``make_settings``), where fastpipe's checks run, happens at every call."""
    import copy

    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fastpipe.config import register_configs

    overrides = list(overrides)
    structural = tuple(o for o in overrides if _structural(o))
    values = [o for o in overrides if not _structural(o)]
    if structural not in _COMPOSITIONS:
        register_configs()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            _COMPOSITIONS[structural] = hydra_compose(config_name="config", overrides=list(structural))
    cfg = copy.deepcopy(_COMPOSITIONS[structural])
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(values), cfg)
    return cfg


def make_settings(overrides=()):
    """Composed and converted settings (dataclasses), with choices filled as the entry point does."""
    from fastpipe.config import to_settings

    cfg = compose(overrides)
    settings = to_settings(cfg, {g: _choice(g, overrides) for g in GROUPS})
    settings.overrides = list(overrides)
    return settings


def _choice(group, overrides):
    """The group's choice: the last ``group=NAME`` override, else the root config's default."""
    import yaml

    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{group}=")]
    if chosen:
        return chosen[-1]
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    return next(str(d[group]) for d in defaults if isinstance(d, dict) and group in d)


SHAPES_ONLY = ("dataset.num_images", "dataset.num_classes", "dataset.seed", "dataset.source_size")


def without_shapes(overrides):
    """``overrides`` without the shapes dataset's own keys, for a run on another dataset."""
    return [o for o in overrides if not o.startswith(SHAPES_ONLY)]


def run_in_process(run_dir, overrides=()):
    """Train in this process (no fresh worker) and return metrics.json's content."""
    from fastpipe.job.training import run_training

    return run_training(make_settings(list(overrides)), Path(run_dir))


def in_process(args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``python -m fastpipe ARGS`` run in this process, as a program calling fastpipe would: its exit code and
    what it printed, as ``run_cli`` gives them: this process's own lines, then what the processes it started
    (ddp ranks, a sweep job's training process) wrote to the inherited descriptors. ``cwd``: the working
    folder for the command; ``env``: variables set for it. Hydra's logging set-up, which points at the
    streams of the command, is put back after it (fastpipe puts back what it set itself)."""
    import contextlib
    import io
    import logging

    import fastpipe.__main__ as entry

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out, err = io.StringIO(), io.StringIO()
    argv, here, environ = sys.argv, os.getcwd(), dict(os.environ)
    code = 0
    with tempfile.TemporaryFile() as child_out, tempfile.TemporaryFile() as child_err:
        sys.stdout.flush(), sys.stderr.flush()
        kept = os.dup(1), os.dup(2)
        os.dup2(child_out.fileno(), 1), os.dup2(child_err.fileno(), 2)
        try:
            sys.argv = ["fastpipe", *map(str, args)]
            os.environ.update({k: str(v) for k, v in (env or {}).items()})
            if cwd is not None:
                os.chdir(cwd)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                entry.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.dup2(kept[0], 1), os.dup2(kept[1], 2)
            os.close(kept[0]), os.close(kept[1])
            sys.argv = argv
            os.chdir(here)
            os.environ.clear()
            os.environ.update(environ)
            root.handlers[:] = handlers
            root.setLevel(level)
        child_out.seek(0), child_err.seek(0)
        stdout = out.getvalue() + child_out.read().decode(errors="replace")
        stderr = err.getvalue() + child_err.read().decode(errors="replace")
    return subprocess.CompletedProcess(["fastpipe", *map(str, args)], code, stdout, stderr)


def run_cli(args, cwd=None, timeout=300):
    """``python -m fastpipe ARGS`` in a subprocess; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "fastpipe", *args], cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=timeout)


def run_side_by_side(commands, timeout=300):
    """Independent commands started together, each in its own process group ({name: argv, or (argv, Popen
    keyword arguments)} -> {name: CompletedProcess}): a test process uses one core of two, and most of a
    short command is its interpreter's start-up. Past ``timeout`` every group still running is killed."""
    started = {}
    try:
        for name, command in commands.items():
            argv, options = command if isinstance(command, tuple) else (command, {})
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            started[name] = (subprocess.Popen(argv, **{"cwd": REPO, **options}, stdout=out, stderr=err, text=True,
                                              start_new_session=True), out, err)
        deadline, done = time.monotonic() + timeout, {}
        for name, (process, out, err) in started.items():
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
            out.seek(0), err.seek(0)
            done[name] = subprocess.CompletedProcess(process.args, process.returncode, out.read(), err.read())
    finally:
        for process, out, err in started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            out.close(), err.close()
    return done


def run_clis(commands, cwd=None, timeout=300):
    """Independent ``python -m fastpipe ARGS`` commands side by side ({name: args} -> {name: CompletedProcess})."""
    return run_side_by_side({name: ([sys.executable, "-m", "fastpipe", *args], {"cwd": cwd or REPO})
                             for name, args in commands.items()}, timeout)


def fastpipe_env(*paths, **variables):
    """The environment for a process a test starts: ``paths`` ahead of the test modules and this
    checkout on PYTHONPATH, plus ``variables``."""
    return dict(os.environ, **variables, PYTHONPATH=os.pathsep.join([*map(str, paths), os.environ["PYTHONPATH"]]))


def run_sweep(sweep_dir, args, *paths):
    """``python -m fastpipe -m ARGS`` into ``sweep_dir``, run in this process (``in_process``: its jobs' fresh
    training processes are started as a sweep's are); ``paths``: folders of a project's own modules, on the
    import path of this process and of those it starts."""
    added = [str(p) for p in paths]
    sys.path[:0] = added
    try:
        return in_process(["-m", *args, f"hydra.sweep.dir={sweep_dir}"],
                          env={"PYTHONPATH": os.pathsep.join([*added, os.environ["PYTHONPATH"]])})
    finally:
        for path in added:
            sys.path.remove(path)


# precision x compile over TINY, each job in the Hydra process: the report's tests and the compiled
# runs' tests (tests/integration/test_compile.py) read the same four jobs.
GRID_ARGS = ["precision=fp32,amp", "compile=off,default", "launcher.fresh_process=false"] + TINY


@pytest.fixture
def without_dali(monkeypatch):
    """A machine without NVIDIA DALI: every ``nvidia.dali`` import fails as an absent package's does."""
    import builtins

    real_import = builtins.__import__

    def no_dali(name, *args, **kwargs):
        if name.startswith("nvidia.dali"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    for mod in [m for m in sys.modules if m.startswith("nvidia.dali")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_dali)


@pytest.fixture(scope="session")
def grid_sweep(tmp_path_factory):
    """The GRID_ARGS sweep, run once per session: (its folder, the finished process)."""
    def sweep(folder):
        proc = run_sweep(folder / "sweep", GRID_ARGS)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [str(folder / "sweep"), proc.args, proc.returncode, proc.stdout, proc.stderr]

    sweep_dir, *proc = computed_once(tmp_path_factory, "grid", sweep)
    return Path(sweep_dir), subprocess.CompletedProcess(*proc)


def cpu_runtime(dist=None):
    """A CPU Runtime for building loaders and graphs in tests (``dist``: this process's place)."""
    import torch

    from fastpipe.runtime import Dist, Runtime, cache_root, cpu_cores

    return Runtime(torch.device("cpu"), dist or Dist(), cache_root(), cpu_cores())


def shapes_splits(**params):
    """The built-in shapes dataset as DataSplits (generated once into the test cache)."""
    from fastpipe.data.images import shapes
    from fastpipe.data.splits import DataSplits
    from fastpipe.runtime import cache_root

    built = shapes(cache_root=cache_root(), **params)
    return DataSplits("shapes", built["train"], built["val"])


# Checkpoint and resume runs: fp32 on the CPU, no worker processes, no augmentation: bit-for-bit
# deterministic. 9 steps/epoch.
RESUMABLE = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.epochs=2",
             "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0",
             "train.checkpoint_every=3",
             # constant: these tests stop a run early with max_steps, and a cosine schedule depends on
             # the run's total steps (a resumed run with the same max_steps follows the same schedule)
             "lr_schedule=constant"]
RESUMABLE_TOTAL = 14  # ends mid-epoch 2; half of it (7) is mid-epoch 1
SLOW_MODEL = ["model._target_=fault_models.Slow", "+model.sleep_s=0.15"]  # time to act mid-run


def held_model(hold: Path) -> list:
    """Overrides for a TinyCNN that waits after its 6th training step while the file ``hold`` exists
    (fault_models.Held): a run that stays mid-training until the test removes the file or sends it a stop
    signal (then it checkpoints at the end of step 7)."""
    hold.touch()
    return ["model._target_=fault_models.Held", f"+model.hold={hold}"]


@pytest.fixture(scope="session")
def straight(tmp_path_factory):
    """An uninterrupted RESUMABLE run of RESUMABLE_TOTAL steps: the reference every resumed run must
    reproduce (read, never changed, by the tests that use it)."""
    def run(folder):
        return [str(folder), run_in_process(folder, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}"])]

    run_dir, metrics = computed_once(tmp_path_factory, "straight", run)
    return Path(run_dir), metrics


def assert_same_run(metrics: dict, reference: dict) -> None:
    """Same step count as the ``straight`` run, and losses/accuracy equal to it within 1e-6."""
    assert metrics["status"] == "ok" and metrics["steps"] == reference["steps"] == RESUMABLE_TOTAL
    for key in ("final_loss", "val_loss", "accuracy"):
        assert abs(metrics[key] - reference[key]) <= 1e-6, key


def start_run(run_dir: Path, extra, code=None) -> subprocess.Popen:
    """``python -m fastpipe`` (or a driver ``code``) training a RESUMABLE run in ``run_dir``, stderr piped."""
    args = RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", f"hydra.run.dir={run_dir}", *extra]
    command = [sys.executable, "-m", "fastpipe"] if code is None else [sys.executable, "-c", code]
    return subprocess.Popen(command + args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    """Wait until ``path`` exists, failing early if ``process`` ended first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"training ended before {path.name}: {process.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.05)


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One intra-op thread in the test process: tiny models on a shared 2-core machine run many
    times faster without OpenMP threads spinning against DataLoader workers and other processes."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny():
    return list(TINY)


# NVIDIA DALI is in the dev extra, but has no wheel on some platforms (macOS): its tests skip there
# (found without importing it: DALI's import costs every test worker about a second).
HAVE_DALI = importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None
needs_dali = pytest.mark.skipif(not HAVE_DALI, reason='NVIDIA DALI is not installed: pip install "fastpipe[dali]"')


def load_benchmark_runner():
    """benchmarks/lib/runner.py as a module."""
    return load_benchmark_lib("runner")


def load_benchmark_lib(name: str):
    """benchmarks/lib/NAME.py as a module (benchmarks/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / "lib" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses with postponed annotations look their module up there
    spec.loader.exec_module(module)
    return module
