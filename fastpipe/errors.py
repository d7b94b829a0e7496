"""The errors fastpipe raises for bad input: each message names the problem and the fix.

The entry point prints them as one line (no traceback) and exits with ``EXIT_CODE``.
"""

EXIT_CODE = 2


class FastpipeError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""


class ConfigError(FastpipeError):
    """A setting that cannot work (bad value, missing key, unknown choice)."""


class DataError(FastpipeError):
    """A dataset or packed file that is missing, empty, unreadable or corrupt."""


class EnvironmentProblem(FastpipeError):
    """Something the run needs from the machine is absent (CUDA, DALI, a module)."""


class TrainingError(FastpipeError):
    """Training cannot go on (e.g. the loss stayed non-finite)."""
