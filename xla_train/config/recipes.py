"""Recipes (recipes/NAME.yaml) and key=value overrides, turned into the config LightningCLI parses.

Keys are checked here, against the signatures of the classes the recipe
names, so that a typo gets a one-line error with the nearest valid keys.
Short aliases cover the settings people change most; a key that is the unique
tail of a longer one (model.dropout -> model.net.dropout) is taken as that key.
Each value is set at its key in the recipe's own mapping, as the command line spelled it: jsonargparse then parses
and type-checks every value, as it would the same flag.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
from pathlib import Path
from typing import Literal, Optional, Union

import yaml
from jsonargparse import get_loader
from jsonargparse.typing import NonNegativeFloat, PositiveFloat, PositiveInt

from xla_train.errors import ConfigError
from xla_train.runtime.registry import runtime_names

ALIASES = {
    "accelerator": "trainer.accelerator",
    "devices": "trainer.devices",
    "num_nodes": "trainer.num_nodes",
    "precision": "trainer.precision",
    "strategy": "trainer.strategy",
    "epochs": "trainer.max_epochs",
    "batch_size": "data.batch_size",
    "val_fraction": "data.val_fraction",
    "lr": "model.lr",
    "lr_scaling": "model.lr_scaling",
    "data_dir": "data.data_dir",
    "seed": "seed_everything",
    "ckpt": "ckpt_path",
    "logger": "logger_kind",
    "net": "model.net.class_path",
}
RUN_SETTINGS = {  # the run's own settings beside trainer., model. and data.: name -> (type, default, help)
    "recipe_name": (str, "run", "names the run folder"),
    "runs_dir": (str, "runs", "where run folders go"),
    "logger_kind": (Literal["csv", "tensorboard"], "csv", "metrics.csv, or TensorBoard event files"),
    "test_after_fit": (bool, False, "after fit, test the best checkpoint on the held-out split"),
    "predict_samples": (int, 0, "after fit, predict this many held-out inputs on the CPU from the checkpoint"),
    "xla_guard": (
        Literal["warn", "strict", "off"],
        "warn",
        "after warm-up, a new XLA compilation warns, stops the run, or is ignored",
    ),
    "progress_every": (int, 50, "on a terminal, refresh the live bar every N steps (each refresh is a host sync)"),
    "compile_cache": (
        Optional[str],
        "auto",
        "XLA's persistent compile cache: auto (a TPU, and a GPU on runtime=jax: ~/.cache/xla_train/<runtime>_compile_"
        "cache; none on the CPU), off, or a folder (runtime=jax reads it back on the CPU too; torch_xla cannot)",
    ),
    "monitor": (
        Literal["val_acc", "val_loss"],
        "val_acc",
        "the best checkpoint: the epoch of the highest val_acc (ties: the lower val_loss), or of the lowest val_loss "
        "(ties: the higher val_acc)",
    ),
    "checkpoint_every": (int, 0, "also write last.ckpt every N training steps (0: at epoch ends only)"),
    "runtime": (
        Literal[runtime_names()],
        "auto",
        "the XLA runtime: torch_xla, or JAX through torchax (auto: on a TPU the one whose TPU build is installed, on a "
        "GPU JAX, on a CPU torch_xla where installed, else JAX)",
    ),
    "steps_per_execution": (
        Union[PositiveInt, Literal["auto"]],
        "auto",
        "on XLA, run K training steps as one compiled program (one trace, one dispatch); auto: 32 as an XLA While loop, else 1",
    ),
    "execution_loop": (
        Literal["auto", "unroll", "while"],
        "auto",
        "on XLA with steps_per_execution > 1: an XLA While loop over the step, or K unrolled calls (auto: While, except on XLA:CPU)",
    ),
    "scan_chunk": (
        Optional[PositiveInt],
        None,
        "XLA: an LSTM's, GRU's or RNN's time steps per loop iteration of its scan (default: the runtime's for its "
        "platform, 1, or 4 on a GPU with runtime=jax)",
    ),
    "device_data_mb": (
        NonNegativeFloat,
        1024,
        "XLA: what data.on_device=auto may hold on each device, in MB (every split, replicated)",
    ),
    "process_timeout": (
        PositiveFloat,
        300,
        "runtime=jax over num_nodes processes: seconds each waits for the others to join before it ends in one line",
    ),
    "matmul_precision": (
        Literal["default", "high", "highest"],
        "default",
        "XLA: float32 matmuls and convolutions on a TPU as one bf16 pass (default, the Keras tutorials' TPU setting), three, or six (about float32)",
    ),
    "compile": (
        Union[bool, Literal["auto"]],
        "auto",
        "cpu/gpu: torch.compile the net (auto: when the run is long enough to pay back)",
    ),
    "channels_last": (
        Union[bool, Literal["auto"]],
        "auto",
        "cpu/gpu: channels_last weights and image batches (auto: for conv nets)",
    ),
}
TOP_LEVEL = ("seed_everything", "ckpt_path", *(k for k in RUN_SETTINGS if k != "recipe_name"))  # key -> --key


def recipes_dir() -> Path:
    """XLA_TRAIN_RECIPES where set; else the recipes an installed wheel carries (xla_train/recipes/, mapped there by
    pyproject.toml from the repository's top-level recipes/), else that top-level folder of a checkout."""
    if os.environ.get("XLA_TRAIN_RECIPES"):
        return Path(os.environ["XLA_TRAIN_RECIPES"])
    package = Path(__file__).resolve().parents[1]
    installed = package / "recipes"
    return installed if installed.is_dir() else package.parent / "recipes"


def available_recipes() -> list[str]:
    return sorted(p.stem for p in recipes_dir().glob("*.yaml"))


def recipe_path(name: str) -> Path:
    p = Path(name).expanduser()
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    p = recipes_dir() / f"{name}.yaml"
    if not p.is_file():
        raise ConfigError(
            f"unknown recipe {name!r}; the recipes are: {', '.join(available_recipes()) or '(none)'} "
            f"(in {recipes_dir()})"
        )
    return p


def load_recipe(path: Path) -> dict:
    """The recipe's mapping, read by the YAML loader jsonargparse reads a --config file with."""
    try:
        recipe = get_loader("yaml")(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"recipe {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(recipe, dict):
        raise ConfigError(f"recipe {path} must be a mapping of model/data/trainer settings")
    return recipe


def _params(fn, owner: type | None = None) -> list[str]:
    """fn's named parameters; for an `owner` class's __init__ that takes **settings (data modules: data/base.py),
    also those of the next __init__ up its MRO, as jsonargparse follows them."""
    params = inspect.signature(fn).parameters
    named = [n for n, p in params.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if owner is not None and any(p.kind is p.VAR_KEYWORD for p in params.values()):
        parent = next((c for c in owner.__mro__[1:] if "__init__" in vars(c)), None)
        if parent is not None and parent is not object:
            named += [n for n in _params(parent.__init__, parent) if n not in named]
    return named


def _import(class_path: str):
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"class {class_path!r} cannot be imported") from None


def require_named_net(ckpt: str, named: bool) -> None:
    """validate and test rebuild a checkpoint's net: a user's net in it is imported only where the user names its
    class, never because the checkpoint, or the run config beside it, does (models/reference.py)."""
    from xla_train.checkpoint import read_inference_block, safe_load
    from xla_train.models.reference import NetRef, unnamed

    ref = NetRef.from_block(read_inference_block(safe_load(ckpt), ckpt), ckpt)
    if ref.key is None and not named:
        raise unnamed(ref, ckpt)


def valid_keys(recipe: dict, pairs: dict[str, str], net_class=None, net_given: bool = False) -> dict[str, str]:
    """User-facing dotted key -> the key of LightningCLI's config that it sets. `net_class`: the class the user's net= names,
    imported already (config/run_spec.py); with `net_given` (an instance, or a builder) no net class is imported:
    its arguments are its own."""
    from lightning.pytorch import Trainer

    from xla_train.training.module import Classifier

    keys = {f"trainer.{n}": f"trainer.{n}" for n in _params(Trainer.__init__)}
    keys.update({f"model.{n}": f"model.{n}" for n in _params(Classifier.__init__) if n != "net"})
    from xla_train.models.reference import import_class, parameter_names

    given = pairs.get("model.net.class_path") or pairs.get("net")
    net_path = given or ((recipe.get("model") or {}).get("net") or {}).get("class_path")
    keys["model.net.class_path"] = "model.net.class_path"
    if net_path and not net_given:
        names, _ = parameter_names(net_class if net_class is not None else import_class(net_path))
        keys.update({f"model.net.{n}": f"model.net.init_args.{n}" for n in names})
    data_path = pairs.get("data.class_path") or (recipe.get("data") or {}).get("class_path")
    keys["data.class_path"] = "data.class_path"
    if data_path:
        data_class = _import(data_path)
        keys.update({f"data.{n}": f"data.init_args.{n}" for n in _params(data_class.__init__, data_class)})
    keys.update({k: k for k in TOP_LEVEL})
    return keys


def resolve_key(key: str, keys: dict[str, str]) -> str:
    key = ALIASES.get(key, key)
    if key in keys:
        return key
    tail = "." + key.rsplit(".", 1)[-1]
    root = key.split(".", 1)[0] + "." if "." in key else ""
    matches = [k for k in keys if k.startswith(root) and k.endswith(tail)]
    if len(matches) == 1:
        return matches[0]
    near = difflib.get_close_matches(key, list(dict.fromkeys([*keys, *ALIASES])), n=3, cutoff=0.6) or matches[:3]
    hint = f"; did you mean {' or '.join(near)}?" if near else "; see `python -m xla_train fit --help`"
    raise ConfigError(f"unknown key {key!r}{hint}")


def latest_checkpoint(runs_dir: str, name: str) -> str:
    from xla_train.training.run_folder import RunFolder

    run = RunFolder.latest_with_last(runs_dir, name)
    if run is None:
        raise ConfigError(f"ckpt=last but no run of {name!r} under {runs_dir}/{name} has a last.ckpt")
    return str(run.last)


def recipe_config(
    command: str, name: str | None, pairs: dict[str, str], flags: list[str], net_class=None, net_given: bool = False
) -> dict | None:
    """The config of a command for a recipe and key=value pairs (config/run_spec.py, RunSpec): the recipe's mapping
    with each value set at the key it resolves to; None for `--help` without a recipe. The user's net as valid_keys
    takes it: `net_class`, a class net= names; `net_given`, an instance or a builder, which the spec sets at model.net
    itself. Either way a checkpoint's user net counts as named."""
    if name is None and any(f in ("-h", "--help") for f in flags):  # every option, the recipe's classes aside
        return None
    if name is None:
        raise ConfigError(f"which recipe? add recipe=NAME; the recipes are: {', '.join(available_recipes())}")
    path = recipe_path(name)
    recipe = load_recipe(path)
    # A run's saved config.yaml can serve as the recipe; it keeps the name its runs are filed under.
    name = str(recipe.get("recipe_name") or path.stem)
    ckpt = next((v for k, v in pairs.items() if ALIASES.get(k, k) == "ckpt_path"), None)
    if ckpt == "last":
        ckpt = latest_checkpoint(pairs.get("runs_dir", recipe.get("runs_dir", "runs")), name)
    if ckpt and command in ("validate", "test"):
        require_named_net(ckpt, net_given or net_class is not None)  # before the recipe's classes are imported
    keys = valid_keys(recipe, pairs, net_class, net_given)
    config = {**recipe, "recipe_name": name}
    resolved = {keys[resolve_key(k, keys)]: v for k, v in pairs.items()}
    if resolved.get("ckpt_path") == "last":
        resolved["ckpt_path"] = ckpt
    # a class path before its init arguments, whatever order they came in; of the recipe's arguments for another
    # class, those the new class takes stay, as jsonargparse keeps them for --X.class_path after --config
    for key, value in sorted(resolved.items(), key=lambda kv: not kv[0].endswith(".class_path")):
        node, before = put(config, key, value)
        if key.endswith(".class_path") and before != value and node.get("init_args"):
            prefix = key[: -len("class_path")] + "init_args."
            takes = {k[len(prefix) :] for k in keys.values() if k.startswith(prefix)}
            node["init_args"] = {k: v for k, v in node["init_args"].items() if k in takes}
    return config


def put(config: dict, key: str, value) -> tuple[dict, object]:
    """Set `value` at the dotted `key` of a nested config, making the mappings on the way (a class given as its
    path alone becomes {class_path: ...}); returns (the innermost mapping, the value the key held before)."""
    *parents, leaf = key.split(".")
    node = config
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {"class_path": child} if isinstance(child, str) else {}
        node = child
    before, node[leaf] = node.get(leaf), value
    return node, before
