"""python -m xla_train [fit|validate|test|predict|devices] recipe=NAME key=value ... [--lightning.flags]

key=value pairs become LightningCLI flags, so every Trainer option is reachable
and jsonargparse checks every type. Before that, each key is checked against
the recipe's classes so that a typo gets the nearest valid keys, not a usage
dump. `predict` never imports Lightning or torch_xla: it is plain torch on the
CPU. The Python API (api.py) goes through the same path as fit/validate/test.
"""
from __future__ import annotations

import re
import sys

from xla_train.errors import ConfigError, UserError

LIGHTNING_COMMANDS = ("fit", "validate", "test")
COMMANDS = LIGHTNING_COMMANDS + ("predict", "devices", "bench")
USAGE = ("usage: python -m xla_train [fit|validate|test|predict|devices|bench] recipe=NAME key=value ... "
         "[--lightning.flag=value]")


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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        print("commands: fit (default), validate, test, predict, devices, bench (`bench --help`); "
              "recipe=NAME picks recipes/NAME.yaml; `fit --help` lists every Lightning option")
        return 0
    try:
        if argv and argv[0] == "bench":  # its own subcommands and keys: xla_train/bench/command.py
            from xla_train.bench.command import bench_command

            return bench_command(argv[1:])
        command, pairs, flags = split_argv(argv)
        if command == "predict":
            from xla_train.predict import predict_command

            return predict_command(pairs, flags)
        if command == "devices":
            return devices_command(pairs)
        return lightning_command(command, pairs, flags)
    except Exception as e:
        user_error = find_user_error(e)
        if user_error is None:
            raise
        print(f"xla_train: error: {user_error}", file=sys.stderr)
        return user_error.exit_code
    except KeyboardInterrupt:
        print("xla_train: interrupted", file=sys.stderr)
        return 130


def find_user_error(exc: BaseException | None) -> UserError | None:
    """Our own error, even when jsonargparse or Lightning re-raised it wrapped in theirs."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def run_lightning(command: str, pairs: dict[str, str], flags: list[str]):
    """The one way from a recipe and key=value pairs to a finished LightningCLI run; the CLI and the Python
    API (api.py) both come through here, so they resolve the same config and raise the same errors."""
    from jsonargparse import ArgumentError

    from xla_train.recipes import lightning_args

    args = lightning_args(command, pairs, flags)
    from xla_train.lightning_cli import XlaTrainCLI

    saved_argv, sys.argv = sys.argv, sys.argv[:1]  # the args are given explicitly; keep Lightning from re-reading argv
    try:
        return XlaTrainCLI(args)
    except ArgumentError as e:
        raise ConfigError(one_line(str(e))) from None
    finally:
        sys.argv = saved_argv


def lightning_command(command: str, pairs: dict[str, str], flags: list[str]) -> int:
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from xla_train.resume import PREEMPTED_EXIT_CODE

    try:
        run_lightning(command, pairs, flags)
    except SIGTERMException:  # the Preemption callback has written last.ckpt and said where
        return PREEMPTED_EXIT_CODE
    except SystemExit as e:  # --help / --print_config end here, as Lightning intends
        return int(e.code or 0)
    return 0


def one_line(message: str) -> str:
    """jsonargparse explains a type error over many lines; keep the key, what it expected and what it got."""
    message = re.sub(r"<class '([\w.]+)'>", r"\1", message)
    lines = [ln.strip(" -") for ln in message.strip().splitlines() if ln.strip(" -")]
    key = ".".join(re.findall(r'Parser key "([^"]+)"', message))
    expected = next((ln for ln in lines if ln.startswith("Expected")), None)
    if key and expected:
        expected, _, got = expected.partition(". Got value: ")
        got = got or next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Given value:")), "")
        expected = re.sub(r"^Expected (a )?", "expected ", expected)
        return f"{key}: {expected}" + (f", got {got!r}" if got else "")
    return lines[0] if lines else "invalid arguments"


def devices_command(pairs: dict[str, str]) -> int:
    """What a user checks first on a new machine: which devices each accelerator= would train on."""
    from xla_train.runtime.devices import describe_devices
    from xla_train.runtime.plan import ACCELERATORS

    unknown = set(pairs) - {"accelerator"}
    if unknown:
        raise ConfigError(f"devices takes only accelerator={'|'.join(ACCELERATORS)}, not {', '.join(sorted(unknown))}")
    print(describe_devices(pairs.get("accelerator", "xla")))
    return 0
