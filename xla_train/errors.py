"""Errors that end a run with one clear line instead of a traceback.

Raise these where the wrong input is detected; the CLI prints the message and
exits non-zero. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


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


def find_user_error(exc: BaseException | None) -> UserError | None:
    """Our own error, even when jsonargparse or Lightning re-raised it wrapped in theirs."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def require_positive(prefix: str, **sizes: int) -> None:
    """A layer size of 0 or less: one line naming the key, not torch's 'negative dimension' traceback."""
    for name, value in sizes.items():
        if value < 1:
            raise ConfigError(f"{prefix}{name}={value} must be at least 1")


def require_probability(prefix: str, **rates: float) -> None:
    for name, value in rates.items():
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{prefix}{name}={value} must be in [0, 1)")
