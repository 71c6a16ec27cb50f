"""`python -m xla_train [fit|validate|test] recipe=NAME key=value ... [--lightning.flags]`: the Lightning commands.

key=value pairs are parsed into the run's spec (config/run_spec.py), as the Python API's keywords are, and set at
their keys in the config LightningCLI parses (config/recipes.py checks each key against the recipe's classes first),
so every Trainer option is reachable and jsonargparse checks every type; native --flags are parsed on top.
"""

from __future__ import annotations


def lightning_command(command: str, pairs: dict[str, str], flags: list[str], early=None) -> int:
    """`early`: the interpreter's clocks before any heavy import (cli/main.py, EARLY_CLOCKS)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from xla_train.config.build import run_lightning
    from xla_train.config.run_spec import RunSpec
    from xla_train.training.resume import PREEMPTED_EXIT_CODE
    from xla_train.training.run_clock import process_start

    try:  # the command's time from its interpreter's start, imports included
        run_lightning(RunSpec.parse(command, pairs, flags, started=process_start(early)))
    except SIGTERMException:  # the Preemption callback has written last.ckpt and said where
        return PREEMPTED_EXIT_CODE
    except SystemExit as e:  # --help / --print_config end here, as Lightning intends
        return int(e.code or 0)
    return 0
