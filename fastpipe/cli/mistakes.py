"""One line, instead of Hydra's own message, for the commonest mistakes on fastpipe's command line.

Hydra prints a config it cannot compose and exits 1 from its ``run_and_report``; ``explain_hydra_errors``
wraps that function so that a mistake fastpipe can name exits 1 with fastpipe's line alone (``Explained``,
printed by the entry point; Hydra's advice to add ``+`` is wrong for a misspelt key), and any other
message lists no ``schema_*`` entry among a group's options (they are the structured configs a group's
YAML files start from, not choices). The mistakes named:

- a group choice no searched folder holds (``model=ringnet``): the ``--config-dir`` to add when a
  folder here holds it (``conf/model/ringnet.yaml``), else the group's choices and the nearest one;
- a key the config lacks, without ``+`` (``model.hiden=8``): what the same key gets with ``+``, the
  callable's parameters (``_target_`` groups) or the schema's keys and the nearest one.
"""
from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from fastpipe.config.registry import SCHEMA_PREFIX
from fastpipe.errors import FastpipeError

APPEND = re.compile(r"To append to your config use \+(.+)\Z")  # Hydra's line for a key the config lacks


class Explained(SystemExit):
    """Hydra's exit after a composition error, with fastpipe's one line about it (None: nothing to add)."""

    def __init__(self, code, explanation: Optional[str]) -> None:
        super().__init__(code)
        self.explanation = explanation


def explain_hydra_errors(config_name: str) -> None:
    """Wrap Hydra's ``run_and_report`` (once) as the module docstring says; ``config_name``: the app's
    primary config, composed again to explain a key the config lacks."""
    from hydra._internal import hydra as hydra_class, utils

    report = utils.run_and_report
    if getattr(report, "explains", False):
        return

    def run_and_report(func):
        def composing():
            try:
                return func()
            except Exception as exc:
                try:
                    line = explain(exc, sys.argv[1:], config_name)
                except Exception:  # a courtesy: Hydra's message stands without it, never with a traceback
                    line = None
                if line is not None:  # fastpipe's line alone: Hydra's advice (add +) is wrong for a misspelt key
                    raise Explained(1, line) from None
                shown = without_schemas(exc)
                if shown is exc:
                    raise
                raise shown.with_traceback(exc.__traceback__) from exc.__cause__

        return report(composing)

    run_and_report.explains = True
    for module in (utils, hydra_class):  # --info reports through the name hydra.py imported
        module.run_and_report = run_and_report


def report_like_hydra(exc: Exception) -> None:
    """Report the composition error ``exc`` as Hydra reports one (its message, exit 1, fastpipe's line):
    for ``--help``, whose composition Hydra leaves outside its report (a traceback otherwise)."""
    from hydra._internal import utils

    def fail():
        raise exc

    utils.run_and_report(fail)


def without_schemas(exc: Exception) -> Exception:
    """``exc``, or for a missing config the same error without ``schema_*`` entries among its options."""
    from hydra.errors import MissingConfigException

    if not isinstance(exc, MissingConfigException) or not exc.options:
        return exc
    lines = [line for line in str(exc).splitlines() if not line.startswith(f"\t{SCHEMA_PREFIX}")]
    options = [o for o in exc.options if not o.startswith(SCHEMA_PREFIX)]
    return MissingConfigException("\n".join(lines), exc.missing_cfg_file, options)


def explain(exc: Exception, argv: List[str], config_name: str) -> Optional[str]:
    """fastpipe's line about the composition error ``exc`` of the command line ``argv``, or None."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file:
        return missing_choice(exc.missing_cfg_file, exc.options or [], Path.cwd(), argv)
    added = APPEND.search(str(exc))
    if isinstance(exc, ConfigCompositionException) and added and isinstance(exc.__cause__, (ConfigKeyError,
                                                                                             ConfigAttributeError)):
        return unknown_key(added.group(1), argv, config_name)
    return None


def missing_choice(path: str, options: Sequence[str], here: Path, argv: Sequence[str] = ()) -> Optional[str]:
    """The line for ``path`` (``model/ringnet``), which no searched config folder holds, with ``+`` when
    the command line ``argv`` adds the group (``+experiment=regression``)."""
    group, _, name = path.rpartition("/")
    if not group:
        return None
    plus = "+" if any(arg.startswith(f"+{group}=") for arg in argv) else ""
    for found in sorted(here.glob(f"{group}/{name}.yaml")) + sorted(here.glob(f"*/{group}/{name}.yaml")):
        folder = found.parents[len(group.split("/"))].relative_to(here)  # the folder holding group/
        return (f"{plus}{group}={name} is {found.relative_to(here)}, which this command does not search: add "
                f"--config-dir {folder}")
    choices = sorted(o for o in options if not o.startswith(SCHEMA_PREFIX))
    nearest = difflib.get_close_matches(name, choices, n=1)
    guess = f" (did you mean {group}={nearest[0]}?)" if nearest else ""
    return (f"{plus}{group}={name} is not a choice of {group}{guess}; its choices: {', '.join(choices) or 'none'} (a "
            f"project's own {group}/{name}.yaml comes with --config-dir DIR)")


def unknown_key(override: str, argv: List[str], config_name: str) -> Optional[str]:
    """The line ``+override`` gets (``model.hiden=8``: the callable's parameters; ``train.epoch=3``: the
    schema's keys), from composing again the job it failed in with ``+``; None when that composes."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode
    from omegaconf import open_dict

    from fastpipe.config import job_choices, to_settings
    from fastpipe.config.objects import OBJECT_GROUPS

    if not GlobalHydra.instance().is_initialized():  # --help: Hydra has let go of its search path
        return None
    args = get_args_parser().parse_args(argv)
    parsed = OverridesParser.create().parse_overrides(args.overrides)
    jobs = [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    job = next((j for j in jobs if override in j), None)
    if job is None:
        return None
    job = [f"+{o}" if o == override else o for o in job]
    previous = HydraConfig.instance().cfg
    try:
        cfg = GlobalHydra.instance().config_loader().load_configuration(args.config_name or config_name, job,
                                                                        RunMode.RUN)
        HydraConfig.instance().set_config(cfg)  # ${hydra:...} resolves as in the job
        choices = job_choices(cfg.hydra.runtime.choices, cfg)
        with open_dict(cfg):
            del cfg["hydra"]
        group = override.split(".", 1)[0]  # a _target_ group's keys are checked against its callable
        to_settings(cfg, choices, check=False).check_own_values([group] if group in OBJECT_GROUPS else [], False)
    except FastpipeError as exc:
        return str(exc)
    finally:
        HydraConfig.instance().cfg = previous
    return None
