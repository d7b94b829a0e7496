"""Every command line the docs show (README.md and docs/**/*.md: fenced blocks, with backslash lines joined,
and inline ``python -m fastpipe...`` spans) is still accepted as written, as far as composing goes.

``python -m fastpipe ARGS``: Hydra's own argument parser takes the flags (``-m``, ``--cfg``, ``--config-dir``,
``--help``...), and the overrides compose with Hydra's config loader over the search path the app builds
(fastpipe's conf/, a ``--config-dir`` folder put in as Hydra puts it): groups and their choices, keys and
their types, ``+sweep=`` presets, ``hydra/sweeper=`` and ``hydra/launcher=`` with their ``hydra.*`` keys.
A sweep's jobs are expanded as the sweep's own check expands them (fastpipe.sweeps.check.sweep_jobs: the
command's lists and a preset's ``hydra.sweeper.params``; for Optuna, the bounds of its search space), and
its first and last jobs are composed. Each job composed is converted to fastpipe's settings with their
checks (``to_settings`` and ``Config.check``: the schemas, each ``_target_`` imported and its keys, the
combination of choices). ``python -m fastpipe.pack / .doctor / .evaluate / .consolidate / .report``: the
module ``python -m`` runs is imported and its argparse parser takes the arguments (the tool itself does not
run); a pack of a dataset config also composes that dataset with the ``dataset.*`` settings given.

What it does not prove: that a command trains, or finds its data, GPUs, packages or files; that a
sweep's other jobs compose (only each list's first and last values are); that a sweep's own check,
launcher or sweeper accept it past composing. Placeholders the docs use (``...``, ``myproj``, a reader's
own package, a flag named in prose) are replaced or skipped by the small allow-lists below, each saying
why; the allow-lists' entries must still name a command of the docs.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from conftest import REPO

EXAMPLE = REPO / "examples" / "friedman"

# Commands not checked, by their text after ``python -m``: each is not a command as written.
SKIP = {
    "fastpipe.<command>": "architecture.md's pattern for the tools' names",
    "fastpipe.foo": "architecture.md's example of a new tool, which does not exist",
    "fastpipe data=foo": "architecture.md's example of a new data=foo choice, which does not exist",
    "fastpipe.pack SRC OUT [dataset.KEY=VALUE ...]": "pack-format.md's usage synopsis ([...] is optional)",
}
# What a command leaves to its context, by its text after ``python -m``: words added to it (for ``...``,
# in its place).
COMPLETE = {
    # a flag named in prose, without its value: the value it takes
    "fastpipe.pack --verify": ["PACK"],
    "fastpipe.report --parity-tol": ["0.5", "DIR"],
    # a comment in a folder tree, on the line of the file it writes
    "fastpipe.report DIR --save-best": ["conf/experiment/myproj.yaml"],
}
# Words of a command replaced before it is checked (None: dropped).
SUBSTITUTE = {
    "...": None,  # "and your other overrides": the command as shown
    # the reader's own winner, written by report --save-best into their project's conf/experiment/; the
    # repository's project (examples/friedman, see PROJECT_CONF) has its regression.yaml
    "+experiment=myproj": "+experiment=regression",
    "+experiment=NAME": "+experiment=regression",
}
# Commands composed and converted without importing their _target_ s: they name the reader's own code.
NO_IMPORT = {
    "fastpipe model._target_=mypkg.nets.Net +model.width=64": "mypkg is the reader's package",
}
# A project's conf/ (``--config-dir conf``, ``hydra.searchpath=[file://conf]``): such commands run from the
# project's folder (README.md and data.md say examples/friedman; myproj is the reader's), here
# examples/friedman, whose configs import its friedman.py from there.
PROJECT_CONF = ("--config-dir conf", "file://conf")
# The error pages show commands that fail on purpose (a --shard-size of 2XB): only their flags are checked.
FLAGS_ONLY = "docs/errors/"

FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
COMMAND = re.compile(r"(?<![\w./-])python -m fastpipe(?![\w-])")


@dataclass(frozen=True)
class DocCommand:
    page: str  # relative to the repository
    line: int
    text: str  # as found, from ``python -m`` to its end (lines joined, its comment left out)
    module: str  # what ``python -m`` runs: fastpipe, fastpipe.pack, ...
    args: Tuple[str, ...]  # its arguments, completed and with placeholders replaced

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def key(self) -> str:
        """The text after ``python -m``: what the allow-lists name."""
        return self.text.split(" ", 2)[2]

    @property
    def cwd(self) -> Path:
        return EXAMPLE if any(p in self.text for p in PROJECT_CONF) else REPO


def pages() -> List[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def words(text: str) -> List[str]:
    """The shell words of the command at the start of ``text``, up to its comment, a shell operator
    (``&&``, ``;``, ``|``) or the ``)`` that closes an aside."""
    lex = shlex.shlex(text, posix=True, punctuation_chars="();&|")
    lex.whitespace_split = True
    found = []
    for word in lex:
        if word and all(c in lex.punctuation_chars for c in word):
            break
        found.append(word)
    return found


def commands_in(page: Path) -> List[DocCommand]:
    """The ``python -m fastpipe...`` commands of ``page``: in its fenced blocks, every one on each line
    (trailing backslashes joined); outside them, each inline code span that is one."""
    name = str(page.relative_to(REPO))
    lines = page.read_text().split("\n")
    found: List[Tuple[int, str]] = []
    prose: List[Tuple[int, str]] = []
    fence: Optional[str] = None
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        i += 1
        marker = FENCE.match(line)
        if fence is None and marker:
            fence = marker.group(1)
        elif fence is not None and marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence) \
                and not marker.group(2).strip():
            fence = None
        elif fence is None:
            prose.append((number, line))
        else:
            while line.rstrip().endswith("\\") and i < len(lines):
                line = line.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
            found += [(number, line[m.start():]) for m in COMMAND.finditer(line)]
    text, numbers = "\n".join(t for _, t in prose), [n for n, _ in prose]
    for m in INLINE.finditer(text):
        span = " ".join(m.group(1).split())  # a span may go on over a line break
        if span.startswith("python -m fastpipe"):
            found.append((numbers[text.count("\n", 0, m.start())], span))
    commands = []
    for number, rest in found:
        argv = words(rest)
        text = " ".join(argv)
        given = argv[3:]
        extra = COMPLETE.get(text.split(" ", 2)[2] if len(argv) > 2 else "", [])
        if "..." in given and extra:
            at = given.index("...")
            given = given[:at] + extra + given[at + 1:]
        else:
            given += extra
        args = tuple(SUBSTITUTE.get(a, a) for a in given if SUBSTITUTE.get(a, a) is not None)
        commands.append(DocCommand(name, number, text, argv[2], args))
    return commands


def doc_commands() -> List[DocCommand]:
    return [c for page in pages() for c in commands_in(page)]


def params(app: bool):
    """pytest params of the ``python -m fastpipe`` commands (``app``) or of the other tools', each named by
    its page and line (``#2``: the line's second); a SKIP command is a param skipped with its reason."""
    seen: Dict[str, int] = {}
    out = []
    for c in doc_commands():
        seen[c.where] = seen.get(c.where, 0) + 1
        if (c.module == "fastpipe") != app:
            continue
        marks = [pytest.mark.skip(reason=SKIP[c.key])] if c.key in SKIP else []
        out.append(pytest.param(c, id=c.where + (f"#{seen[c.where]}" if seen[c.where] > 1 else ""), marks=marks))
    return out


@contextlib.contextmanager
def working_in(folder: Path):
    """The command's working folder, and the import path ``python -m`` has there; both put back after, and
    a project's modules imported from there (friedman) forgotten."""
    here, path, modules = os.getcwd(), list(sys.path), set(sys.modules)
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        os.chdir(here)
        sys.path[:] = path
        for name in set(sys.modules) - modules if folder != REPO else ():
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(folder)):
                del sys.modules[name]


def why(exc: BaseException) -> str:
    """The exception's type and first line, and its cause's (Hydra's messages say the reason there)."""
    line = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    return line + (f" ({why(exc.__cause__)})" if exc.__cause__ else "")


# --- python -m fastpipe ----------------------------------------------------------------------------------


_LOADERS: dict = {}
_COMPOSED: dict = {}
_CHECKED: dict = {}


def config_loader(config_dir: Optional[str]):
    """Hydra's config loader over the search path ``python -m fastpipe [--config-dir DIR]`` builds
    (hydra/_internal/utils.py: run_hydra), DIR relative to the working folder."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.errors import SearchPathException

    from fastpipe.config import config_dir as fastpipe_conf, register_configs
    from hydra_plugins.fastpipe_sweeps import register as register_sweep_plugins

    register_configs()  # what python -m fastpipe registers before composing
    register_sweep_plugins()
    folder = os.path.abspath(config_dir) if config_dir else None
    if folder not in _LOADERS:
        search_path = create_config_search_path(fastpipe_conf())
        if folder is not None:
            if not os.path.isdir(folder):
                raise SearchPathException(f"Additional config directory '{folder}' not found")
            search_path.prepend(provider="command-line", path=f"file://{folder}",
                                anchor=SearchPathQuery(provider="schema"))
        _LOADERS[folder] = ConfigLoaderImpl(config_search_path=search_path)
    return _LOADERS[folder]


def shapes(override, loader) -> bool:
    """Whether the parsed ``override`` shapes what Hydra composes (a group's choice, ``hydra/...``, the search
    path, a package; a list, which Hydra refuses outside -m as it composes) rather than set a value in the
    composed config (``train.epochs=3``, ``seed=1``, ``+model.width=64``, ``hydra.run.dir=...``)."""
    key = override.key_or_group
    return (override.is_sweep_override() or override.package is not None or key.startswith("hydra.searchpath")
            or "/" in key or ("." not in key and loader.repository.group_exists(key)))


def shape_key(config_dir: Optional[str], shaping: list) -> tuple:
    """The overrides that shape a composition, as the key of what Hydra composes for them: choices of the
    root config's groups alone (``precision=fp32 compile=off``) compose the same config in any order, and
    without those that choose a group's default (here: ``()``, the default composition)."""
    plain = [o for o in shaping if not o.input_line.startswith(("+", "~")) and o.package is None
             and "." not in o.key_or_group and "/" not in o.key_or_group and isinstance(o.value(), str)]
    if shaping and len(plain) == len(shaping) == len({o.key_or_group for o in plain}):
        defaults = compose(config_dir, [])[1]
        return tuple(sorted(o.input_line for o in plain if defaults.get(o.key_or_group) != o.value()))
    return tuple(o.input_line for o in shaping)


def compose(config_dir: Optional[str], overrides: List[str], hydra_node: bool = False):
    """``(cfg, choices)``: the config Hydra's loader composes for ``overrides``, not to be changed (without
    its ``hydra`` node and the ``hydra.*`` values unless ``hydra_node``), and Hydra's ``runtime.choices``.
    As conftest.compose: what the overrides that shape it give is composed once in
    this process (a Hydra composition costs about 0.1 s; the docs' commands share shapes), the value
    overrides applied after by Hydra's own function, as Hydra applies them
    (ConfigLoaderImpl._load_configuration_impl)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode
    from omegaconf import open_dict

    loader = config_loader(config_dir)
    parsed = OverridesParser.create().parse_overrides(overrides)
    shaping = shape_key(config_dir, [o for o in parsed if shapes(o, loader)])
    key = (config_dir and os.path.abspath(config_dir), os.getcwd(), shaping)
    if key not in _COMPOSED:
        full = loader.load_configuration("config", list(shaping), RunMode.RUN)
        job = copy.deepcopy(full)
        with open_dict(job):
            del job["hydra"]  # what a job's task function receives
        _COMPOSED[key] = full, job, dict(full.hydra.runtime.choices)
    full, job, choices = _COMPOSED[key]
    values = [o for o in parsed if not shapes(o, loader) and (hydra_node or not o.is_hydra_override())]
    if not values:
        return (full if hydra_node else job), choices
    cfg = copy.deepcopy(full if hydra_node else job)
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    return cfg, choices


def settings_of(cfg, choices: dict, import_targets: bool = True):
    """The settings a job converts ``cfg`` to, with fastpipe's checks; its ``_target_`` s imported and
    checked unless ``import_targets`` is false. (No ``${hydra:...}`` in fastpipe's configs nor the docs'
    commands: HydraConfig is not set; one would fail here, saying so.)"""
    from fastpipe.config import job_choices, to_settings

    settings = to_settings(cfg, job_choices(choices, cfg), check=False)  # a copy of cfg, as a job's
    if import_targets:
        settings.check()
    else:
        settings.check_own_values((), True)
    return settings


def check_job(config_dir: Optional[str], overrides: List[str], import_targets: bool = True) -> None:
    """Compose one job of ``overrides`` (its ``hydra.*`` values on Hydra's node) and convert it, once per
    job in this process (the docs show the same command, or a sweep the same job, on several pages):
    raises what that raised."""
    key = (config_dir and os.path.abspath(config_dir), os.getcwd(), tuple(overrides), import_targets)
    if key not in _CHECKED:
        try:
            if any(o.startswith("hydra.") for o in overrides):
                compose(config_dir, overrides, hydra_node=True)
            settings_of(*compose(config_dir, overrides), import_targets)
            _CHECKED[key] = None
        except Exception as exc:
            _CHECKED[key] = exc
    if _CHECKED[key] is not None:
        raise _CHECKED[key]


def sweep_base(config_dir: Optional[str], overrides: List[str]) -> List[str]:
    """The overrides of a sweep that its own config (its sweeper and launcher, a preset's params) depends
    on: the ``hydra`` ones and the configs added (``+sweep=all``), without the lists, which Hydra leaves out
    of it too (and refuses over its own config). The others (``model=resnet50``, ``train.epochs=3``) shape
    the jobs, each composed with them; the ``hydra`` ones shape Hydra's node alone, composed here."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import ConfigCompositionException

    loader = config_loader(config_dir)
    parsed = OverridesParser.create().parse_overrides(overrides)
    swept = [o.input_line for o in parsed if o.is_sweep_override() and o.is_hydra_override()]
    if swept:
        raise ConfigCompositionException(f"Sweeping over Hydra's configuration is not supported : '{swept[0]}'")
    return [o.input_line for o in parsed if not o.is_sweep_override() and (
        o.is_hydra_override() or (o.input_line.startswith("+") and shapes(o, loader)))]


def bounds(override) -> List[str]:
    """A searched key's first and last values (``choice(64,128,256)``: 64 and 256; ``interval(0,0.2)``: 0.0
    and 0.2), each as an override."""
    from hydra.core.override_parser.types import IntervalSweep

    value = override.value()
    values = [value.start, value.end] if isinstance(value, IntervalSweep) else list(override.sweep_string_iterator())
    return [f"{override.get_key_element()}={v}" for v in (values[0], values[-1])]


def sweep_jobs(cfg, overrides: List[str]) -> List[List[str]]:
    """The jobs of a sweep of ``overrides`` (``cfg``: its own config), as the sweep's check expands them
    (a grid sweeper: its preset's params and the command's lists); for Optuna, whose trials choose their
    own values, its fixed overrides with the first, then the last, value of each searched key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from fastpipe.sweeps import check

    parsed = OverridesParser.create().parse_overrides(overrides)
    task = [o.input_line for o in parsed if not o.is_hydra_override()]
    view = OmegaConf.create({"hydra": {"sweeper": OmegaConf.to_container(cfg.hydra.sweeper, resolve=False),
                                       "overrides": {"task": task}}})
    jobs = check.sweep_jobs(view)
    if not str(cfg.hydra.sweeper.get("_target_", "")).endswith(check.GRID_SWEEPERS):
        searched = [bounds(o) for o in parsed if o.is_sweep_override() and not o.is_hydra_override()]
        jobs = [jobs[0] + [b[end] for b in searched] for end in (0, -1)]
    return jobs


def check_app_command(args: List[str], import_targets: bool = True, flags_only: bool = False) -> int:
    """Raise where ``python -m fastpipe ARGS`` does not compose (its flags, its overrides, the jobs checked);
    returns how many jobs were checked."""
    from hydra._internal.utils import get_args_parser
    from omegaconf import OmegaConf

    parsed = get_args_parser().parse_args(args)
    commands = parsed.run + parsed.multirun + (parsed.cfg is not None) + (parsed.info is not None)
    assert commands <= 1, "only one of --run, --multirun, --cfg and --info can be given (Hydra's rule)"
    assert not parsed.resolve or parsed.cfg or parsed.help, "--resolve goes with --cfg or --help (Hydra's rule)"
    overrides = list(parsed.overrides)
    if flags_only:
        return 0
    if parsed.package and parsed.cfg in ("hydra", "all"):
        cfg, _ = compose(parsed.config_dir, sweep_base(parsed.config_dir, overrides) if parsed.multirun else overrides,
                         hydra_node=True)
        assert OmegaConf.select(cfg, parsed.package) is not None, f"--package {parsed.package}: no such node"
    if not parsed.multirun:
        check_job(parsed.config_dir, overrides, import_targets)
        return 1
    jobs = sweep_jobs(compose(parsed.config_dir, sweep_base(parsed.config_dir, overrides), hydra_node=True)[0],
                      overrides)
    for job in [jobs[0], jobs[-1]] if len(jobs) > 1 else jobs:
        check_job(parsed.config_dir, job, import_targets)
    return min(len(jobs), 2)


@pytest.mark.parametrize("command", params(app=True))
def test_a_docs_command_composes(command: DocCommand):
    from fastpipe.errors import EnvironmentProblem

    with working_in(command.cwd):
        try:
            check_app_command(list(command.args), command.key not in NO_IMPORT, command.page.startswith(FLAGS_ONLY))
        except EnvironmentProblem as exc:  # a package this machine lacks (DALI...): the machine's, not the docs'
            pytest.skip(f"{command.where}: {exc}")
        except (Exception, SystemExit) as exc:
            pytest.fail(f"{command.where}: `{command.text}` does not compose: {why(exc)}", pytrace=False)


# --- python -m fastpipe.pack / .doctor / .evaluate / .consolidate / .report ------------------------------


class Parsed(Exception):
    """What a tool's parser made of its arguments, raised in place of the tool's run."""

    def __init__(self, namespace: argparse.Namespace):
        super().__init__(namespace)
        self.namespace = namespace


def check_tool_command(module: str, args: List[str]) -> Optional[argparse.Namespace]:
    """Import what ``python -m MODULE`` runs and give ARGS to its parser (the tool's ``main``, stopped as its
    parser returns): the arguments parsed, or None for the tool named alone (prose: "python -m
    fastpipe.pack makes packs"). argparse's refusal is its SystemExit, its line on stderr."""
    import importlib
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None, f"no module {module}"
    runs = importlib.import_module(f"{module}.__main__" if spec.submodule_search_locations else module)
    if not args:
        return None
    parse_args = argparse.ArgumentParser.parse_args

    def parse_only(self, argv=None, namespace=None):
        raise Parsed(parse_args(self, argv, namespace))

    argparse.ArgumentParser.parse_args = parse_only
    try:
        runs.main(list(args))
    except Parsed as done:
        return done.namespace
    finally:
        argparse.ArgumentParser.parse_args = parse_args
    raise AssertionError(f"{module}.main returned without parsing its arguments")


def check_pack(args: argparse.Namespace) -> None:
    """fastpipe.pack's checks of its arguments before packing; for a dataset config's name (not a folder),
    that dataset composed with the command's ``dataset.*`` settings and checked, as the tool does."""
    from fastpipe.cli import pack

    if args.verify or not args.src:
        return
    if args.shard_size:
        pack.parse_bytes(args.shard_size)
    assert 1 <= args.quality <= 100 and (args.size is None or (len(args.size) <= 2 and min(args.size) >= 8))
    if pack._as_path(args.src) or not pack._named(args.src, args.config_dir):
        return  # an ImageFolder (/data/my-images): the reader's
    assert all(o.startswith("dataset.") for o in args.overrides), "only dataset.KEY=VALUE settings follow SRC OUT"
    settings = settings_of(*compose(args.config_dir, [f"dataset={args.src}", *args.overrides]), import_targets=False)
    settings.dataset.check()


@pytest.mark.parametrize("command", params(app=False))
def test_a_docs_tool_command_parses(command: DocCommand, capsys):
    with working_in(command.cwd):
        try:
            parsed = check_tool_command(command.module, list(command.args))
            if parsed is not None and command.module == "fastpipe.pack" and not command.page.startswith(FLAGS_ONLY):
                check_pack(parsed)
        except SystemExit as exc:
            pytest.fail(f"{command.where}: `{command.text}`: exit {exc.code}: "
                        f"{(capsys.readouterr().err.strip().splitlines() or [''])[-1]}", pytrace=False)
        except Exception as exc:
            pytest.fail(f"{command.where}: `{command.text}`: {why(exc)}", pytrace=False)


# --- the check itself ------------------------------------------------------------------------------------


def test_the_commands_are_found_whole_and_the_allow_lists_are_in_use():
    """Commands on every kind of line (fenced; joined from backslash lines; after ``&&`` or a variable; two in
    one YAML comment; inline over a line break) are found whole, and each allow-list entry still names a
    command of the docs (a stale one is removed, not kept)."""
    commands = doc_commands()
    found = {(c.where.partition(":")[0], c.text) for c in commands}  # by page: a line number moves with any edit
    assert len(found) >= 150
    assert ("README.md", "python -m fastpipe") in found
    assert ("README.md", "python -m fastpipe --cfg job") in found
    assert ("docs/sweeps.md", "python -m fastpipe -m hydra/launcher=gpus +sweep=all") in found
    one_comment = [c for c in commands if c.text in (
        "python -m fastpipe.report /tmp/ladder5 --save-best conf/experiment/NAME.yaml",
        "python -m fastpipe --config-dir conf +experiment=NAME")]
    assert len({c.where for c in one_comment}) == 1 and len(one_comment) == 2  # two commands in one YAML comment
    joined = [c for c in commands if c.where.startswith("README.md:") and c.args[-2:] == (
        "train.target=0.95", "train.eval_every=10") and "hydra/sweeper=race" in c.args]
    assert joined, "the README's race command, joined from its backslash lines"
    keys = {c.key for c in commands}
    assert set(SKIP) | set(COMPLETE) | set(NO_IMPORT) <= keys
    assert all(any(word in c.text.split() for c in commands) for word in SUBSTITUTE)


BROKEN = [  # a command, and what refusing it says
    (["precision=nonsense"], "Could not find 'precision/nonsense'"),
    (["train.epoch=3"], "Could not override 'train.epoch'"),
    (["train.epochs=abc"], "Error merging override train.epochs=abc"),
    (["+model.hiden=8"], "model.hiden is not a parameter"),  # of the model's callable
    (["precision=fp32,amp"], "Ambiguous value"),  # a list without -m
    (["--cfg", "job", "-m"], "only one of"),
    (["-m", "precision=fp32,amp", "compile=off,nonsense"], "Could not find 'compile/nonsense'"),  # the last job
    (["-m", "+sweep=nonsense"], "Could not find 'sweep/nonsense'"),
    (["-m", "hydra/launcher=gpus", "hydra.launcher.gpus_per_jobs=4"], "Could not override 'hydra.launcher"),
    (["-m", "hydra/sweeper=optuna", "optimizer.lr=interval(1e-4,1e-1)", "+model.hiden=8"], "model.hiden"),
    (["--config-dir", "conf", "+experiment=regression"], "Could not find 'experiment/regression'"),  # fastpipe's conf/
]


@pytest.mark.parametrize("args, error", [pytest.param(*b, id=" ".join(b[0])) for b in BROKEN])
def test_a_broken_command_is_refused(args, error):
    with working_in(REPO), pytest.raises(Exception, match=re.escape(error)):
        check_app_command(args)


@pytest.mark.parametrize("module, args", [
    ("fastpipe.doctor", ["--jsn"]),
    ("fastpipe.evaluate", ["RUN", "--weights", "worst"]),
    ("fastpipe.pack", ["shapes", "x.fppack", "--codec", "png"]),
], ids=["doctor", "evaluate", "pack"])
def test_a_broken_tool_command_is_refused(module, args):
    with pytest.raises(SystemExit) as refused:
        check_tool_command(module, args)
    assert refused.value.code == 2  # argparse's
    with pytest.raises(AssertionError, match="no module"):
        check_tool_command("fastpipe.nonsense", [])


def test_a_pack_of_a_dataset_with_a_wrong_setting_is_refused():
    args = check_tool_command("fastpipe.pack", ["shapes", "x.fppack", "dataset.num_imgs=64"])
    with working_in(REPO), pytest.raises(Exception, match="num_imgs"):
        check_pack(args)
