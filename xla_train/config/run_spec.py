"""A run as the command line and the Python API both describe it, built once: one RunSpec for fit, validate and test.

`python -m xla_train` parses its key=value pairs into a spec and the API spells its keywords as those pairs, so both
resolve the same config and raise the same one-line errors. The spec's config() is what XlaTrainCLI
(config/lightning_cli.py) hands LightningCLI to parse: the recipe's mapping with every setting at its key, and the net
at model.net whatever Python handed over (an instance as itself, a builder with its arguments). The net is resolved
here, once: the class path net= names (a Python class or builder goes by its path, as on the command line) is imported
here and by xla_train nowhere after: the recipe's keys, the builder's call and the checkpoint's name take the object.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from xla_train.config.recipes import ALIASES, put, recipe_config
from xla_train.errors import ConfigError

NET_KEY = "model.net.class_path"


@dataclass(frozen=True)
class Net:
    """The user's net, resolved: `made` is an nn.Module instance, its class, or a builder (a function that returns
    the net), named by import `path`. A class goes to jsonargparse by its path; a builder through build_with, which
    jsonargparse calls with it and `args` once the seed is set, as it builds a class (it can call only a function
    annotated to return a Module)."""

    kind: Literal["instance", "class", "builder"]
    made: Any
    path: str | None = None
    args: dict = field(default_factory=dict)


@dataclass
class RunSpec:
    """fit, validate or test of a recipe (a name, or a YAML file such as a run's saved config.yaml)."""

    command: str
    recipe: str | None
    settings: dict[str, str] = field(default_factory=dict)  # key=value as the command line spells them
    flags: list[str] = field(default_factory=list)  # native --flags
    net: Net | None = None
    arrays: dict[str, Any] | None = None  # x, y, validation_data, test_data in memory: ArraysDataModule.hold's
    started: float | None = None  # perf_counter when the run's clock starts; None: when the CLI is built

    @classmethod
    def parse(cls, command: str, pairs: dict[str, str], flags=(), *, net=None, arrays=None, started=None) -> RunSpec:
        """key=value pairs, recipe= among them, into a spec. `net`: an nn.Module instance Python hands over."""
        pairs = dict(pairs)
        recipe = pairs.pop("recipe", None)
        pairs, resolved = resolve_net(pairs, net)
        return cls(command, recipe, pairs, list(flags), resolved, arrays, started)

    def config(self) -> dict | None:
        """The command's config for LightningCLI to parse (None: `--help` without a recipe): the recipe's mapping, each
        setting at the key it resolves to as the command line spelled it (jsonargparse types it as it would the flag),
        and an instance or a builder at model.net."""
        net = self.net
        given = net is not None and net.kind != "class"
        config = recipe_config(
            self.command, self.recipe, self.settings, self.flags, net.made if net and not given else None, given
        )
        if config is not None and given:
            from xla_train.models.reference import build_with, class_path_of

            call = {"builder": net.made, "path": net.path, "args": net.args}  # build_with's arguments
            made = net.made if net.kind == "instance" else {"class_path": class_path_of(build_with), "init_args": call}
            put(config, NET_KEY.rpartition(".")[0], made)
        return config


def resolve_net(pairs: dict[str, str], instance=None) -> tuple[dict[str, str], Net | None]:
    """(the pairs without a builder's, the net: `instance`, else the class or builder net= (model.net.class_path=)
    names, imported here). A builder's arguments are model.net.NAME=value or model.net.init_args.NAME=value, any name
    where it takes **kwargs; with a checkpoint (validate, test, resume), the ones it trained with unless given again."""
    from xla_train.models.reference import import_class, is_builder

    if instance is not None:
        return pairs, Net("instance", instance)
    key = next((k for k in pairs if ALIASES.get(k, k) == NET_KEY), None)
    if key is None:
        return pairs, None
    path = pairs[key]
    made = import_class(path)  # the run's one import of the net's class path
    if not is_builder(made):
        return pairs, Net("class", made, path)
    rest, args = _builder_args(pairs, key, made)
    return rest, Net("builder", made, path, {**_trained_args(rest, made), **args})


def _builder_args(pairs: dict[str, str], key: str, builder) -> tuple[dict[str, str], dict]:
    from xla_train.models.reference import parameter_names

    names, any_name = parameter_names(builder)
    rest, args = {}, {}
    for k, v in pairs.items():
        name = k.split(".", 3)[-1] if k.startswith("model.net.init_args.") else k.split(".", 2)[-1]
        if k == key or not k.startswith("model.net."):
            if k != key:
                rest[k] = v
            continue
        if name not in names and not any_name:
            near = difflib.get_close_matches(name, names, n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(near)}?" if near else f"; it takes {', '.join(names) or 'none'}"
            raise ConfigError(f"{pairs[key]} takes no argument {name!r}{hint}")
        args[name] = yaml.safe_load(v) if isinstance(v, str) else v
    return rest, args


def _trained_args(pairs: dict[str, str], builder) -> dict:
    """The plain arguments a checkpoint (ckpt=) records for this builder's net, where it records this builder."""
    ckpt = next((v for k, v in pairs.items() if ALIASES.get(k, k) == "ckpt_path"), None)
    if not ckpt or ckpt == "last" or not Path(ckpt).is_file():
        return {}
    from xla_train.checkpoint import read_inference_block, safe_load
    from xla_train.models.reference import NetRef, class_path_of

    ref = NetRef.from_block(read_inference_block(safe_load(ckpt), ckpt), ckpt)
    return ref.plain_args() if ref.class_path == class_path_of(builder) else {}
