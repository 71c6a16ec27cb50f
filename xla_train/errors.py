"""Errors that end a run with one clear line instead of a traceback.

Raise these where the wrong input is detected; the CLI prints the message and
exits non-zero. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import re


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


class ProcessLost(UserError):
    """Another process of a run over several processes ended or stopped answering, so this one ends too (exit code 1:
    nothing the user gave was wrong)."""

    exit_code = 1


class TrainingDiverged(UserError):
    """A training loss that is not a number: the run stopped, its last finite state kept (exit code 1: it ran)."""

    exit_code = 1


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


def _type_name(name: str) -> str:
    """A type as a command line would write its values: 'auto' for Literal['auto'], null for NoneType."""
    if name.startswith("typing.Literal["):
        return name[len("typing.Literal[") : -1]
    name = name.rsplit(".", 1)[-1]
    return {"NoneType": "null", "SeedInt": "int"}.get(name, name)


def one_line(message: str) -> str:
    """jsonargparse explains a type error over many lines; keep the key, what it expected and what it got."""
    message = re.sub(r"<class '([\w.]+)'>", r"\1", message)
    lines = [ln.strip(" -") for ln in message.strip().splitlines() if ln.strip(" -")]
    key = ".".join(re.findall(r'Parser key "([^"]+)"', message))
    expected = next((ln for ln in lines if ln.startswith("Expected")), None)
    reason = next((ln for ln in lines if ln.startswith("Not of type")), None)
    given = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Given value:")), "")
    if key and reason and given and "does not conform to restriction" in reason:  # a union with a range (seed)
        return f"{key}: {given} is out of range ({reason.split(': ', 1)[-1]})"
    if key and expected:
        expected, told, got = expected.partition(". Got value:")  # a class's own argument: what it was given
        got = got.strip() if told else given
        subtypes = next((ln for ln in lines if ln.startswith("Subtypes: [")), "")[len("Subtypes: [") : -1]
        members = re.findall(r"typing\.Literal\[[^\]]*\]|[\w.]+", subtypes)
        nested = message.count('Parser key "') > 1  # a class's own argument failed: its line is the one to keep
        if members and not nested and "[" not in re.sub(r"typing\.Literal\[[^\]]*\]", "", subtypes):
            # a union of plain types: name every member, not only the first (compile: bool or 'auto'); a union
            # with a list in it keeps the first line, which names what each element should be
            expected = "Expected " + " or ".join(_type_name(t) for t in members)
        expected = re.sub(r"^Expected (a )?", "expected ", expected)
        expected = re.sub(r"typing\.Literal\[([^\]]*)\]", r"one of \1", expected)  # a choice: its values
        return f"{key}: {expected}" + (f", got {got!r}" if got or told else "")
    if key and reason:  # jsonargparse's restricted types: "Not of type PositiveInt: 0 does not conform to ..."
        return f"{key}: {reason[0].lower()}{reason[1:]}"
    return lines[0] if lines else "invalid arguments"
