"""The one way from a run's spec (config/run_spec.py: a recipe, key=value settings, the net) to a built (and usually
run) LightningCLI.

The command line, the Python API and the benchmarks all come through here, so
they resolve the same config, check the same keys and raise the same one-line
errors. `build_parts` stops before the Trainer: the benchmarks build their own
from runtime.plan with the steps they need.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

from jsonargparse import ArgumentError

from xla_train.config.lightning_cli import XlaTrainCLI
from xla_train.config.run_spec import RunSpec
from xla_train.config.startup_lines import held_startup_lines
from xla_train.errors import ConfigError, one_line


@contextmanager
def argument_errors_in_one_line():
    """jsonargparse's ArgumentError as the one-line ConfigError every bad setting is."""
    try:
        yield
    except ArgumentError as e:
        raise ConfigError(one_line(str(e))) from None


def run_lightning(spec: RunSpec) -> XlaTrainCLI:
    """fit/validate/test as `spec` says; returns the finished CLI."""
    # Lightning's start-up lines print once the run starts
    with argument_errors_in_one_line(), held_startup_lines() as lines:
        return XlaTrainCLI(spec, startup=lines)


def build_parts(recipe: str, overrides: dict[str, str], net=None):
    """(Classifier, data module) of a recipe with key=value overrides, seeded and initialised as fit does. `net`: an
    nn.Module instance to build them with."""
    return build_run(recipe, overrides, net)[:2]


def build_run(recipe: str, overrides: dict[str, str], net=None):
    """(Classifier, data module, (max_epochs, max_steps)): build_parts and the length of the run fit would train,
    which steps_per_execution=auto needs to choose K as fit does (the benchmarks)."""
    spec = RunSpec.parse("fit", {"recipe": recipe, **overrides}, net=net)
    logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)  # "Seed set to 0", per build
    with argument_errors_in_one_line(), held_startup_lines():
        cli = XlaTrainCLI(spec, run=False, build_trainer=False)
    trainer = cli.config.get("trainer") or {}
    return cli.model, cli.datamodule, (trainer.get("max_epochs"), trainer.get("max_steps", -1))
