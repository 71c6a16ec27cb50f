"""`python -m xla_train bench [curves|overhead|predict] key=value ...`: each benchmark's keys, checked before it runs.

    bench           recipe= accelerators=cpu,xla batch_sizes=32,128,512,1024 steps=20 warmup=3 devices=1
                    data=synthetic|real precision= chart_batch= timeout= runs_dir=runs
    bench curves    recipe= batch_sizes=32,128,512 epochs=N accelerator= devices= timeout= runs_dir=runs
    bench overhead  recipe= accelerator=xla|tpu batch_size= steps=50 warmup=5 rounds=1 data=synthetic timeout=
    bench predict   ckpt=PATH batch_size=256 repeats=100 threads= runs_dir=runs

The recipe's own model./data. keys (e.g. maxlen=200, model.net.depth=56) pass
through to sweep, curves and overhead. A wrong key or value is one line on
stderr and exit code 2, before any cell starts.
"""
from __future__ import annotations

import difflib
import shlex
from pathlib import Path

from xla_train.errors import ConfigError

SUBCOMMANDS = ("sweep", "curves", "overhead", "predict")
ACCELERATORS = ("cpu", "gpu", "tpu", "xla")
REQUIRED = object()


def positive_int(key: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{key}={value!r} must be a whole number of at least 1")
    return n


def device_count(key: str, value: str) -> int | str:
    return "auto" if value == "auto" else positive_int(key, value)


def batch_list(key: str, value: str) -> list[int]:
    from xla_train.data.base import check_batch_size

    sizes = [positive_int(key, v.strip()) for v in value.split(",") if v.strip()]
    if not sizes:
        raise ConfigError(f"{key}= is empty; give batch sizes like {key}=32,128,512")
    for b in sizes:
        check_batch_size(b)
    if len(set(sizes)) != len(sizes):
        raise ConfigError(f"{key}={value} repeats a batch size")
    return sizes


def one_batch(key: str, value: str) -> int:
    from xla_train.data.base import check_batch_size

    b = positive_int(key, value)
    check_batch_size(b)
    return b


def accelerator_list(key: str, value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in ACCELERATORS]
    if not names or bad:
        raise ConfigError(f"{key}={value!r}: use a comma-separated list of {', '.join(ACCELERATORS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{key}={value} repeats an accelerator")
    return names


def choice(*options: str):
    def parse(key: str, value: str) -> str:
        if value not in options:
            raise ConfigError(f"{key}={value!r}: use {' or '.join(options)}")
        return value
    return parse


def seconds(key: str, value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        s = 0.0
    if not s > 0:
        raise ConfigError(f"{key}={value!r} must be a number of seconds above 0")
    return s


def text(key: str, value: str) -> str:
    if not value.strip():
        raise ConfigError(f"{key}= is empty")
    return value


COMMON = {"runs_dir": (text, "runs")}
KEYS = {
    "sweep": {"recipe": (text, REQUIRED), "accelerators": (accelerator_list, None),
              "batch_sizes": (batch_list, [32, 128, 512, 1024]), "steps": (positive_int, 20),
              "warmup": (positive_int, 3), "devices": (device_count, 1), "precision": (text, None),
              "data": (choice("synthetic", "real"), "synthetic"), "chart_batch": (positive_int, None),
              "timeout": (seconds, 1800.0)},
    "curves": {"recipe": (text, REQUIRED), "batch_sizes": (batch_list, [32, 128, 512]),
               "epochs": (positive_int, None), "accelerator": (choice(*ACCELERATORS), None),
               "devices": (device_count, None), "timeout": (seconds, 7200.0)},
    "overhead": {"recipe": (text, REQUIRED), "accelerator": (choice("xla", "tpu"), "xla"),
                 "batch_size": (one_batch, None),
                 "steps": (positive_int, 50), "warmup": (positive_int, 5), "rounds": (positive_int, 1),
                 "data": (choice("synthetic", "real"), "synthetic"), "timeout": (seconds, 1800.0)},
    "predict": {"ckpt": (text, REQUIRED), "batch_size": (positive_int, 256), "repeats": (positive_int, 100),
                "threads": (positive_int, None)},
}


def parse(argv: list[str]) -> tuple[str, dict]:
    argv_in, argv = list(argv), list(argv)
    sub = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "sweep"
    spec = {**KEYS[sub], **COMMON}
    pairs: dict[str, str] = {}
    for tok in argv:
        if "=" not in tok or tok.startswith(("=", "-")):
            where = f"; bench's subcommand ({', '.join(SUBCOMMANDS[1:])}) must come first" if tok in SUBCOMMANDS else ""
            raise ConfigError(f"unexpected argument {tok!r}; bench takes key=value settings{where}")
        key, value = tok.split("=", 1)
        pairs[key.strip()] = value.strip()
    opts = {}
    for key, (parse_value, default) in spec.items():
        if key in pairs:
            opts[key] = parse_value(key, pairs.pop(key))
        elif default is REQUIRED:
            raise ConfigError(f"bench {sub} needs {key}=" + (" (a recipe name, e.g. recipe=quickstart)"
                                                              if key == "recipe" else " (a checkpoint written by fit)"))
        else:
            opts[key] = default
    opts["overrides"] = recipe_overrides(sub, opts.get("recipe"), pairs, spec)
    opts["command"] = "python -m xla_train " + shlex.join(["bench", *argv_in])
    return sub, opts


def recipe_overrides(sub: str, recipe: str | None, pairs: dict[str, str], spec: dict) -> dict[str, str]:
    """The left-over keys, which must be the recipe's model./data. settings."""
    if not pairs:
        return {}
    if recipe is None:
        key = next(iter(pairs))
        near = difflib.get_close_matches(key, list(spec), n=1)
        raise ConfigError(f"bench {sub} does not take {key}=" + (f"; did you mean {near[0]}=?" if near else
                                                                    f"; its keys are {', '.join(spec)}"))
    from xla_train.recipes import load_recipe, recipe_path, resolve_key, valid_keys

    keys = valid_keys(load_recipe(recipe_path(recipe)), pairs)
    out = {}
    for key, value in pairs.items():
        near = difflib.get_close_matches(key, list(spec), n=1, cutoff=0.75)
        try:
            resolved = resolve_key(key, keys)
        except ConfigError:
            if near:
                raise ConfigError(f"bench {sub} does not take {key}=; did you mean {near[0]}=?") from None
            raise ConfigError(f"bench {sub} does not take {key}=: its keys are {', '.join(spec)}, plus the "
                              f"recipe's model./data. settings") from None
        if resolved == "data.batch_size":
            raise ConfigError(f"bench {sub} sets the batch itself: use "
                              f"{'batch_size' if 'batch_size' in spec else 'batch_sizes'}=")
        if not resolved.startswith(("model.", "data.")):
            raise ConfigError(f"bench {sub} builds the trainer itself, so {key}= cannot be set; its keys are "
                              f"{', '.join(spec)}, plus the recipe's model./data. settings")
        out[key] = value
    return out


def bench_command(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help", "help"):
        blocks = __doc__.split("\n\n")
        print("usage: python -m xla_train bench [curves|overhead|predict] key=value ...")
        print(blocks[1])
        print(blocks[2].replace("\n", " "))
        return 0
    return run_bench(argv)[0]


def run_bench(argv: list[str]) -> tuple[int, Path | None]:
    """(exit code, the results folder); the CLI and xla_train.bench() both come through here."""
    sub, opts = parse(argv)
    if sub == "sweep":
        from xla_train.bench.sweep import sweep_command as command
    elif sub == "curves":
        from xla_train.bench.curves import curves_command as command
    elif sub == "overhead":
        from xla_train.bench.overhead import overhead_command as command
    else:
        from xla_train.bench.predict import predict_bench_command as command
    code = command(opts)
    return code, opts.get("results")
