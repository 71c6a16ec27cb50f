"""python -m xla_train [fit|validate|test|predict|serve|export|devices] recipe=NAME key=value ... [--lightning.flags]

key=value pairs set the recipe's config at their keys for LightningCLI to parse, so every Trainer option is
reachable and jsonargparse checks every type. Before that, each key is checked against
the recipe's classes so that a typo gets the nearest valid keys, not a usage
dump. `predict` and `export` never import Lightning or torch_xla: they are plain torch
on the CPU. The Python API (api.py) goes through the same path as fit/validate/test
(config/build.py). Nothing imports this module but the entry points.
"""

from __future__ import annotations

import importlib
import sys
import time

from xla_train.errors import ConfigError, find_user_error

EARLY_CLOCKS = (time.perf_counter(), time.process_time())  # before any heavy import: training/run_clock.py

LIGHTNING_COMMANDS = ("fit", "validate", "test")
COMMANDS = LIGHTNING_COMMANDS + ("predict", "serve", "export", "devices", "bench")
USAGE = (
    "usage: python -m xla_train [fit|validate|test|predict|serve|export|devices|bench] recipe=NAME key=value ... "
    "[--lightning.flag=value]"
)


def split_argv(argv: list[str]) -> tuple[str, dict[str, str], list[str]]:
    """(command, key=value pairs in order, native --flags)."""
    argv = list(argv)
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "fit"
    pairs: dict[str, str] = {}
    flags: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("-"):
            flags.append(tok)
            if "=" not in tok and i + 1 < len(argv) and not argv[i + 1].startswith("-") and "=" not in argv[i + 1]:
                flags.append(argv[i + 1])
                i += 1
        elif "=" in tok and not tok.startswith("="):
            key, value = tok.split("=", 1)
            pairs[key.strip()] = value
        elif tok in COMMANDS:
            raise ConfigError(f"the command {tok!r} must come first; {USAGE}")
        else:
            raise ConfigError(f"unexpected argument {tok!r}; give settings as key=value. {USAGE}")
        i += 1
    return command, pairs, flags


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else list(argv))


def run(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        print(
            "commands: fit (default), validate, test, predict, serve (ckpt=PATH [port=8000]: HTTP, docs/serving.md), export (ckpt=PATH format=onnx|pt2 [out=PATH]), "
            "devices, bench (`bench --help`); "
            "recipe=NAME picks recipes/NAME.yaml; `fit --help` lists every Lightning option"
        )
        return 0
    try:
        if argv and argv[0] == "bench":  # its own subcommands and keys: cli/bench.py
            from xla_train.cli.bench import bench_command

            return bench_command(argv[1:])
        command, pairs, flags = split_argv(argv)
        if command in (
            "predict",
            "serve",
            "export",
            "devices",
        ):  # typed keys (cli/keys.py); predict, serve, export: plain torch
            fn, kwargs = importlib.import_module(f"xla_train.cli.{command}").parse(pairs, flags)
            return fn(**kwargs)
        from xla_train.cli.fit import lightning_command

        return lightning_command(command, pairs, flags, EARLY_CLOCKS)
    except Exception as e:
        user_error = find_user_error(e)
        if user_error is None:
            raise
        print(f"xla_train: error: {user_error}", file=sys.stderr)
        return user_error.exit_code
    except KeyboardInterrupt:
        print("xla_train: interrupted", file=sys.stderr)
        return 130
