"""The one way from a recipe and key=value settings to a built (and usually run) LightningCLI.

The command line, the Python API and the benchmarks all come through here, so
they resolve the same config, check the same keys and raise the same one-line
errors. `build_parts` stops before the Trainer: the benchmarks build their own
from runtime.plan with the steps they need.
"""

from __future__ import annotations

import logging
import re
import sys
from contextlib import contextmanager

from jsonargparse import ArgumentError

from xla_train.config.lightning_cli import XlaTrainCLI
from xla_train.config.recipes import lightning_args
from xla_train.errors import ConfigError


@contextmanager
def own_argv():
    """The args are given explicitly; keep Lightning and jsonargparse from reading (or warning about) sys.argv."""
    saved, sys.argv = sys.argv, sys.argv[:1]
    try:
        yield
    except ArgumentError as e:
        raise ConfigError(one_line(str(e))) from None
    finally:
        sys.argv = saved


def run_lightning(command: str, pairs: dict[str, str], flags: list[str]) -> XlaTrainCLI:
    """fit/validate/test a recipe with key=value pairs and native --flags; returns the finished CLI."""
    args = lightning_args(command, pairs, flags)
    with own_argv():
        return XlaTrainCLI(args)


def build_parts(recipe: str, overrides: dict[str, str]):
    """(Classifier, data module) of a recipe with key=value overrides, seeded and initialised as fit does."""
    args = lightning_args("fit", {"recipe": recipe, **overrides}, [])[1:]  # no subcommand: run=False
    logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)  # "Seed set to 0", per build
    with own_argv():
        cli = XlaTrainCLI(args, run=False, build_trainer=False)
    return cli.model, cli.datamodule


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
        expected, _, got = expected.partition(". Got value: ")
        got = got or next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Given value:")), "")
        subtypes = next((ln for ln in lines if ln.startswith("Subtypes: [")), "")[len("Subtypes: [") : -1]
        members = re.findall(r"typing\.Literal\[[^\]]*\]|[\w.]+", subtypes)
        if members and "[" not in re.sub(r"typing\.Literal\[[^\]]*\]", "", subtypes):
            # a union of plain types: name every member, not only the first (compile: bool or 'auto'); a union
            # with a list in it keeps the first line, which names what each element should be
            expected = "Expected " + " or ".join(_type_name(t) for t in members)
        expected = re.sub(r"^Expected (a )?", "expected ", expected)
        expected = re.sub(r"typing\.Literal\[([^\]]*)\]", r"one of \1", expected)  # a choice: its values
        return f"{key}: {expected}" + (f", got {got!r}" if got else "")
    if key and reason:  # jsonargparse's restricted types: "Not of type PositiveInt: 0 does not conform to ..."
        return f"{key}: {reason[0].lower()}{reason[1:]}"
    return lines[0] if lines else "invalid arguments"
