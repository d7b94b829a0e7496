"""The run record: metrics.json's keys, their types and order, as one dataclass.

``RunRecord`` has one field per key, in the order metrics.json lists them; docs/measuring.md's table
says what each means. Records are made only by the record package: ``RunRecord.start`` when a run
begins (every key null, status ``failed`` until the trainer fills in its outcome), ``failed(...)``
(``RunRecord.fail`` on a record already started) for every run that did not finish (bad input, a
dead worker, a failed rank, Ctrl-C, a stop signal), ``RunRecord.from_dict`` for a record this run
wrote and now amends; ``results.write`` writes nothing else. Names are checked: ``record.thruput = 1``,
``record.set(thruput=1)`` and ``from_dict({"thruput": 1})`` raise, so a typo is never a new key.

Adding a key is one line: a field of ``RunRecord``, in the place its key takes in metrics.json, with
its type and default (``None``: not measured), e.g. ``target: Optional[Dict[str, Any]] = None``;
then its row in docs/measuring.md's table (tests/unit/record/test_run_record.py checks that every
field has one) and, where the trainer measures it, ``record.set(key=...)`` in job/training.py. A key
written only when it has a value (``traceback``) takes ``when_set()`` as its default. A key that
changes the meaning of existing ones also raises ``SCHEMA_VERSION``, with a row in "Schema versions".

Readers (report/, sweeps/, the Hydra callbacks, tests) get the plain dict of metrics.json
(``results.read``, what a launch returns): records of any version, also ones written by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
import typing
from typing import Any, Dict, Iterable, List, Optional, TypedDict

# What each version of the record changed is in docs/measuring.md ("schema versions").
SCHEMA_VERSION = 9
STATUSES = ("ok", "failed", "preempted", "interrupted", "running")
UNFINISHED = STATUSES[1:]  # what a run that did not finish is (running: began, no outcome yet)


class StepTimes(TypedDict):
    median: Optional[float]
    p90: Optional[float]
    spread: Optional[float]
    windows: int


class PrimaryMetric(TypedDict):
    name: str
    value: float
    higher_is_better: bool


class Best(TypedDict):
    step: int
    value: float


class CheckpointStall(TypedDict):
    median: float
    max: float
    count: int
    write_median: Optional[float]


class ProjectCode(TypedDict):
    commit: Optional[str]
    branch: Optional[str]
    dirty: bool
    diff_sha256: Optional[str]


class FastpipeCode(TypedDict):
    version: str
    commit: Optional[str]


class Code(TypedDict):
    project: Optional[ProjectCode]
    fastpipe: FastpipeCode


class Repeats(TypedDict):
    n: int
    dirs: List[str]
    throughput: List[Optional[float]]
    min: Optional[float]
    max: Optional[float]
    spread: Optional[float]


def when_set():
    """The default of a key written only when it has a value."""
    return field(default=None, metadata={"when_set": True})


@dataclass(slots=True)
class RunRecord:
    """One run's metrics.json (docs/measuring.md, "metrics.json"); ``None`` is null: not measured."""

    schema_version: int = SCHEMA_VERSION
    status: str = "failed"  # one of STATUSES
    reason: Optional[str] = None
    run_id: Optional[str] = None
    choices: Dict[str, str] = field(default_factory=dict)
    overrides: List[str] = field(default_factory=list)
    name: Optional[str] = None  # the config's top-level name
    tags: List[str] = field(default_factory=list)  # the config's top-level tags
    task: Optional[str] = None
    throughput: Optional[float] = None
    tokens_per_s: Optional[float] = None
    step_time_ms: Optional[StepTimes] = None
    epoch_time_s: Optional[float] = None
    epoch_times_s: Optional[List[float]] = None
    warmup_s: Optional[float] = None
    data_wait_frac: Optional[float] = None
    host_frac: Optional[float] = None
    peak_mem_gb: Optional[float] = None
    peak_mem_kind: Optional[str] = None
    gpu_util: Optional[float] = None
    final_loss: Optional[float] = None
    val_metrics: Optional[Dict[str, float]] = None
    primary_metric: Optional[PrimaryMetric] = None
    accuracy: Optional[float] = None
    val_loss: Optional[float] = None
    corpus_baselines: Optional[Dict[str, float]] = None
    nonfinite_steps: Optional[int] = None
    steps: Optional[int] = None
    measured_steps: Optional[int] = None
    compile_fallback: Optional[str] = None
    flops_per_sample: Optional[float] = None
    flops_method: Optional[str] = None
    peak_tflops: Optional[float] = None
    mfu: Optional[float] = None
    checkpoint: Optional[str] = None
    checkpoint_stall_s: Optional[CheckpointStall] = None
    weights: Optional[str] = None  # "ema" or "raw"
    weights_file: Optional[str] = None
    val_metrics_raw: Optional[Dict[str, float]] = None
    best: Optional[Best] = None
    stopped_early: Optional[bool] = None
    stopped_by: Optional[str] = None  # target | early_stop | time_budget; null: the run's full length
    target: Optional[Dict[str, Any]] = None  # train.target: train/target.py's Target.record(), repeats combined
    time_breakdown_s: Optional[Dict[str, float]] = None  # measure/clock.py's RunClock.breakdown()
    setup_parts_s: Optional[Dict[str, float]] = None  # measure/setup.py's SetupParts.record(): set-up's parts
    compile_cache: Optional[Dict[str, Any]] = None  # measure/clock.py's compile_cache(); null without compile
    grad_norm: Optional[float] = None
    batch_size: Optional[int] = None
    batch_size_search: Optional[Dict[str, Any]] = None  # BatchSearch.record(): goal, cap, chosen, seconds, probes
    lr_search: Optional[Dict[str, Any]] = None  # optimizer.lr=auto: LrSearch.record(): rule, curve, suggestion, ...
    model_build_s: Optional[float] = None  # constructing and initialising the model on its device (or sharding it)
    fp8: Optional[Dict[str, Any]] = None  # precision=fp8: Fp8Layers.record(): recipe, converted, kept, ...
    per_rank: Optional[Dict[str, List[Any]]] = None  # measure.steps.PER_RANK_KEYS -> one value per rank
    env: Optional[Dict[str, Any]] = None  # machine.environment()
    code: Optional[Code] = None  # record/provenance.py: the commits the run was made from
    warnings: List[str] = field(default_factory=list)
    # Written only when set:
    traceback: Optional[str] = when_set()  # a crash's (or the failed rank's) Python traceback
    repeats: Optional[Repeats] = when_set()  # a job measured report.repeats times: launch/repeats.py
    exitcode: Optional[int] = when_set()  # launcher=single: the exit code of a worker that died after writing ok

    def __post_init__(self) -> None:
        _check_status(self.status)

    @classmethod
    def start(cls, choices: Dict[str, str], overrides: Iterable[str], env: Optional[dict] = None,
              run_id: Optional[str] = None) -> "RunRecord":
        """A run's record before it measures anything: every key null, status ``failed``."""
        return cls(choices=dict(choices or {}), overrides=list(overrides or []), env=env, run_id=run_id)

    def set(self, **values) -> "RunRecord":
        """Set these keys (names checked: a misspelt one raises); returns the record."""
        unknown = [name for name in values if name not in FIELDS]
        if unknown:
            raise AttributeError(_unknown(unknown))
        if "status" in values:
            _check_status(values["status"])
        for name, value in values.items():
            setattr(self, name, value)
        return self

    def fail(self, reason: str, status: str = "failed", **values) -> "RunRecord":
        """This record as a run that did not finish (``status``, one of UNFINISHED) for ``reason``;
        ``values``: other keys known at that point (checkpoint, traceback, steps so far)."""
        if status not in UNFINISHED:
            raise ValueError(f"a run that did not finish has status {' or '.join(UNFINISHED)}, not {status!r}")
        return self.set(status=status, reason=reason, **values)

    def to_dict(self) -> Dict[str, Any]:
        """metrics.json's content: every key in order, a ``when_set`` key only when it has a value."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not (f.metadata.get("when_set") and getattr(self, f.name) is None)}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "RunRecord":
        """The record of a metrics.json this version wrote (missing keys null); an unknown key raises."""
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise ValueError(f"a record of schema version {version} cannot be amended as version {SCHEMA_VERSION}")
        return cls().set(**data)


FIELDS = {f.name: f for f in fields(RunRecord)}
KEYS = tuple(name for name, f in FIELDS.items() if not f.metadata.get("when_set"))  # in every record
WHEN_SET_KEYS = tuple(name for name in FIELDS if name not in KEYS)


def failed(reason: str, choices: Dict[str, str], overrides: Iterable[str], env: Optional[dict] = None,
           run_id: Optional[str] = None, status: str = "failed", **values) -> RunRecord:
    """The one constructor of the record of a run that did not finish (``status``) for ``reason``,
    written by whichever process saw it end; ``values``: other keys (checkpoint, traceback, steps)."""
    return RunRecord.start(choices, overrides, env, run_id).fail(reason, status, **values)


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"a run's status is one of {', '.join(STATUSES)}, not {status!r}")


def _unknown(names: List[str]) -> str:
    return (f"metrics.json has no key {', '.join(map(repr, names))}; its keys are RunRecord's fields "
            "(fastpipe/record/run_record.py)")


def shape_problem(data: Any) -> Optional[str]:
    """What keeps ``data`` (a metrics.json's content) from being read as a run's record, or None: not a JSON
    object, a status that is not a run's, or a key of this version whose value has the wrong type (a number
    as text, a table as a list). Keys this version does not know are left alone (an older record's)."""
    if not isinstance(data, dict):
        return f"it is a JSON {type(data).__name__}, not an object"
    if data.get("status") not in STATUSES:
        return f"its status is {data.get('status')!r}, not one of {', '.join(STATUSES)}"
    for name, kind in _HINTS.items():
        value = data.get(name)
        if value is not None and not _is(value, kind):
            return f"its {name} is {value!r}, not {_KIND_WORDS.get(_base(kind), 'of its type')}"
    return None


_HINTS = typing.get_type_hints(RunRecord)
_KIND_WORDS = {float: "a number", int: "a whole number", str: "text", bool: "true or false", dict: "a table",
               list: "a list"}


def _base(kind) -> Any:
    """``Optional[X]`` -> X's plain type (``float``, ``dict`` for a Dict or TypedDict, ``list`` for a List)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) is typing.Union and len(args) == 1:
        kind = args[0]
    origin = typing.get_origin(kind) or kind
    if isinstance(origin, type) and issubclass(origin, dict):  # a TypedDict is a dict
        return dict
    return origin


def _is(value: Any, kind) -> bool:
    base = _base(kind)
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return not isinstance(base, type) or isinstance(value, base)
