"""The one way from a recipe and key=value settings to a built (and usually run) LightningCLI.

The command line, the Python API and the benchmarks all come through here, so
they resolve the same config, check the same keys and raise the same one-line
errors. `build_parts` stops before the Trainer: the benchmarks build their own
from runtime.plan with the steps they need.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from jsonargparse import ArgumentError

from xla_train.config.lightning_cli import XlaTrainCLI
from xla_train.config.recipes import ALIASES, lightning_args, take_builder
from xla_train.config.startup_lines import held_startup_lines
from xla_train.errors import ConfigError, one_line


@contextmanager
def argument_errors_in_one_line():
    """jsonargparse's ArgumentError as the one-line ConfigError every bad setting is."""
    try:
        yield
    except ArgumentError as e:
        raise ConfigError(one_line(str(e))) from None


def run_lightning(
    command: str, pairs: dict[str, str], flags: list[str], given: dict | None = None, started: float | None = None
) -> XlaTrainCLI:
    """fit/validate/test a recipe with key=value pairs and native --flags; returns the finished CLI. `given`: what
    Python hands over as objects (XlaTrainCLI); `started`: when the run's clock starts (perf_counter; now)."""
    pairs, given = with_builder(pairs, given)
    args = lightning_args(command, pairs, flags, net_given="net" in given or "builder" in given)
    # Lightning's start-up lines print once the run starts
    with argument_errors_in_one_line(), held_startup_lines() as lines:
        return XlaTrainCLI(args, given=given, started=started, startup=lines)


def with_builder(pairs: dict[str, str], given: dict | None) -> tuple[dict[str, str], dict]:
    """A net named by its builder travels to XlaTrainCLI as `given["builder"]`, not as a class path to parse; with a
    checkpoint (validate, test, resume) its arguments are the ones it trained with, unless given again."""
    pairs, builder = take_builder(pairs)
    if builder is None:
        return pairs, dict(given or {})
    path, args = builder
    ckpt = next((v for k, v in pairs.items() if ALIASES.get(k, k) == "ckpt_path"), None)
    if ckpt and ckpt != "last" and Path(ckpt).is_file():
        from xla_train.checkpoint import read_inference_block, safe_load
        from xla_train.models.reference import NetRef, class_path_of, import_class

        ref = NetRef.from_block(read_inference_block(safe_load(ckpt), ckpt), ckpt)
        if ref.class_path == class_path_of(import_class(path)):
            args = {**ref.plain_args(), **args}
    return pairs, {**(given or {}), "builder": (path, args)}


def build_parts(recipe: str, overrides: dict[str, str], given: dict | None = None):
    """(Classifier, data module) of a recipe with key=value overrides, seeded and initialised as fit does."""
    return build_run(recipe, overrides, given)[:2]


def build_run(recipe: str, overrides: dict[str, str], given: dict | None = None):
    """(Classifier, data module, (max_epochs, max_steps)): build_parts and the length of the run fit would train,
    which steps_per_execution=auto needs to choose K as fit does (the benchmarks)."""
    pairs, given = with_builder({"recipe": recipe, **overrides}, given)
    args = lightning_args("fit", pairs, [], net_given="net" in given or "builder" in given)[1:]
    logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)  # "Seed set to 0", per build
    with argument_errors_in_one_line(), held_startup_lines():
        cli = XlaTrainCLI(args, run=False, build_trainer=False, given=given)
    trainer = cli.config.get("trainer") or {}
    return cli.model, cli.datamodule, (trainer.get("max_epochs"), trainer.get("max_steps", -1))
