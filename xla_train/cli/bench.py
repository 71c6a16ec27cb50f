"""`python -m xla_train bench [SUBCOMMAND] key=value ...`: each benchmark is a function, and its signature is its keys.

    bench (sweep)  recipe= accelerators=cpu,xla batch_sizes=32,128 devices=1 steps_per_execution=1,8
                   progress_every=0 steps= warmup= rounds=
    bench replicas recipe= devices=1,8 processes=1          bench lstm     recipe=imdb maxlens=100,200,500
    bench pipeline recipe= progress_every=0,10 rounds=2     bench overhead recipe= accelerator=xla|tpu runtime= rounds=
    bench curves   recipe= batch_sizes=32,128,512 epochs=   bench predict  ckpt=PATH forms=eager,compile,onnx,int8
    bench text     reviews=50000 maxlen=500                 bench serve    ckpt=PATH concurrency=1,8,32 max_batch_sizes=1,32

Keys are checked as fit's are (cli/keys.py); with a recipe, keys a subcommand lacks are its model./data. settings
(maxlen=200). Every error is one line and exit code 2, before any cell starts.
"""

from __future__ import annotations

import importlib
import inspect
import shlex
from pathlib import Path

from xla_train.bench.report import settings_prefix
from xla_train.cli.keys import read_keys
from xla_train.config.recipes import load_recipe, recipe_path, resolve_key, valid_keys
from xla_train.errors import ConfigError

SUBCOMMANDS = {
    "sweep": "sweep:sweep",
    "replicas": "presets:replicas",
    "lstm": "presets:lstm",
    "pipeline": "presets:pipeline",
    "overhead": "overhead:overhead",
    "curves": "curves:curves",
    "predict": "predict:predict",
    "text": "text:text",
    "serve": "serve:serve",
}
INTERNAL = {"overrides", "grid", "command"}  # filled in here, not by the user


def function(sub: str):
    module, name = SUBCOMMANDS[sub].split(":")
    return getattr(importlib.import_module(f"xla_train.bench.{module}"), name)


def parse(argv: list[str]) -> tuple:
    """(the subcommand's function, its keyword arguments)."""
    argv_in, argv = list(argv), list(argv)
    sub = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "sweep"
    fn = function(sub)
    params = {n: p for n, p in inspect.signature(fn).parameters.items() if n not in INTERNAL}
    pairs: dict[str, str] = {}
    switches = [tok for tok in argv if tok.startswith("-") and "=" not in tok]
    for tok in argv:
        if tok in switches:
            continue
        if "=" not in tok or tok.startswith(("=", "-")):
            where = f"; bench's subcommand ({', '.join(SUBCOMMANDS)}) must come first" if tok in SUBCOMMANDS else ""
            raise ConfigError(f"unexpected argument {tok!r}; bench takes key=value settings{where}")
        key, value = tok.split("=", 1)
        pairs[key.strip()] = value.strip()
    default = params["recipe"].default if "recipe" in params else None
    recipe = pairs.get("recipe") or (None if default is inspect.Parameter.empty else default)
    overrides: dict[str, str] = {}
    kwargs = read_keys(
        fn,
        pairs,
        switches,
        prog=f"bench {sub}",
        skip=INTERNAL,
        others=lambda rest: overrides.update(recipe_overrides(sub, recipe, rest, params)),
    )
    if "overrides" in inspect.signature(fn).parameters:
        kwargs["overrides"] = overrides
    kwargs["command"] = settings_prefix() + "python -m xla_train " + shlex.join(["bench", *argv_in])
    return fn, kwargs


def recipe_overrides(sub: str, recipe, pairs: dict[str, str], params: dict) -> dict[str, str]:
    """The keys the subcommand lacks: with a recipe, its model./data. settings; else a misspelt key."""
    theirs = f"its keys are {', '.join(params)}" + (", plus the recipe's model./data. settings" if recipe else "")
    overrides = {}
    for key, value in pairs.items():
        if key in ("batch_size", "data.batch_size") and "batch_sizes" in params:
            raise ConfigError(f"bench {sub} sets the batch itself: use batch_sizes=")
        try:
            if recipe is None:
                raise ConfigError("")
            resolved = resolve_key(key, valid_keys(load_recipe(recipe_path(recipe)), pairs))
        except ConfigError as e:
            try:  # fit's own "did you mean", over this subcommand's keys
                resolve_key(key, {k: k for k in params})
            except ConfigError as ours:
                e = ours if "did you mean" in str(ours) or not str(e) else e
            raise ConfigError(f"bench {sub}: {e}; {theirs}") from None
        if not resolved.startswith(("model.", "data.")):
            raise ConfigError(f"bench {sub} builds the trainer itself, so {key}= cannot be set; {theirs}")
        overrides[key] = value
    return overrides


def bench_command(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help", "help"):
        print("usage: python -m xla_train bench [SUBCOMMAND] key=value ...")
        print(__doc__.split("\n\n")[1])
        return 0
    return run_bench(argv)[0]


def run_bench(argv: list[str]) -> tuple[int, Path | None]:
    """(exit code, the results folder); the CLI and xla_train.benchmark() both come through here."""
    fn, kwargs = parse(argv)
    return fn(**kwargs)
