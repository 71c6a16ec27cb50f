"""Errors that end a run with one clear line instead of a traceback.

Raise these where the wrong input is detected; the CLI prints the message and
exits non-zero. Anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Something the user gave was wrong; the message says what, and what would be right."""

    exit_code = 2


class ConfigError(UserError, ValueError):
    """A recipe, key or value that cannot be used."""


class DataError(UserError):
    """A data set that is missing, corrupt or in the wrong layout."""


class CheckpointError(UserError):
    """A checkpoint file that cannot be loaded safely."""


class HardwareError(UserError):
    """The requested accelerator or device count is not on this machine."""
