"""Every recipe in recipes/ says how to run it, and the commands it gives really parse.

Each recipe's header comment names the exact command and an example override.
Those very command lines go through the CLI's key checks and jsonargparse's
type checks (--print_config parses and prints without instantiating anything,
so nothing is downloaded and no device is touched).
"""

import shlex
from pathlib import Path

import pytest
import yaml

from helpers import run_cli, runtime_key
from test_imdb import write_aclimdb
from test_own_model import write_image_folder
from xla_train.cli.main import main, split_argv
from xla_train.config.recipes import available_recipes, load_recipe, recipe_path
from xla_train.config.run_spec import RunSpec

RECIPES = available_recipes()
EXAMPLES = str(Path(__file__).resolve().parents[1] / "examples")  # the headers' PYTHONPATH=examples: my_nets.py


def header(name: str) -> list[str]:
    lines = recipe_path(name).read_text().splitlines()
    out = []
    for line in lines:
        if not line.startswith("#"):
            break
        out.append(line.lstrip("#").strip())
    return out


def documented_commands(name: str) -> list[list[str]]:
    """The argv after `python -m xla_train` of every command line in the header."""
    return [
        shlex.split(line.split("python -m xla_train", 1)[1]) for line in header(name) if "python -m xla_train" in line
    ]


def test_the_shipped_recipes_are_all_found():
    assert {"quickstart", "cifar10", "cifar10_resnet"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_header_gives_the_command_and_an_example_override(name):
    commands = documented_commands(name)
    assert header(name), f"{name}.yaml does not start with a comment"
    assert commands, f"{name}.yaml's header has no `python -m xla_train` command"
    assert all(f"recipe={name}" in argv for argv in commands), commands
    overrides = {key for argv in commands for key in split_argv(argv)[1]} - {"recipe", "accelerator"}
    assert overrides, f"{name}.yaml's header shows no example override beside recipe= and accelerator="


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_is_the_config_of_its_runs(name):
    config = RunSpec.parse("fit", {"recipe": name}).config()
    assert config == {**load_recipe(recipe_path(name)), "recipe_name": name}
    assert config["model"]["net"]["class_path"] and config["data"]["class_path"]


def leaves(config: dict, prefix: str = ""):
    """(dotted key, value) of every value of a nested config that is not a mapping."""
    for key, value in config.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def node(config: dict, key: str):
    """The value at a dotted key (model.net.init_args.depth) in a printed config."""
    for part in key.split("."):
        config = config[part]
    return config


@pytest.mark.parametrize("name", RECIPES)
def test_documented_commands_parse_with_jsonargparse(name, capsys, monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    recipe = load_recipe(recipe_path(name))
    for argv in documented_commands(name):
        assert main(argv + ["--print_config"]) == 0, argv
        out = capsys.readouterr().out
        config = yaml.safe_load(out)
        command, pairs, flags = split_argv(argv)
        net = pairs.get("net") or recipe["model"]["net"]["class_path"]  # a user's net, named on the command line
        assert config["model"]["net"]["class_path"] == net, out
        assert config["data"]["class_path"] == recipe["data"]["class_path"], out
        given = RunSpec.parse(command, pairs, flags).config()
        for key, value in leaves(given):  # the recipe's values and each override landed where they were meant to
            value = yaml.safe_load(value) if isinstance(value, str) else value
            assert node(config, key) == value, (argv, key, node(config, key))


@pytest.fixture(scope="module")
def imdb_root(tmp_path_factory):
    return write_aclimdb(tmp_path_factory.mktemp("imdb"), per_class=40)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("images"))


TRAINED = {  # every recipe, and a user's net from a folder on 8 devices, as a short fit (two of them in bf16); a
    # user's text CSV: test_own_model.py::test_a_users_packed_gru_trains_on_a_text_csv_padded_at_the_back
    "cifar10_bf16": lambda f: (
        "recipe=cifar10",
        f"data_dir={f['cifar']}",
        "download=false",
        "batch_size=32",
        "precision=bf16-mixed",
    ),
    "cifar10_resnet": lambda f: (  # its blocks, shortcuts and optimizer at depth 8; depth 20 is test_resnet.py's
        "recipe=cifar10_resnet",
        "depth=8",
        f"data_dir={f['cifar']}",
        "download=false",
        "batch_size=32",
    ),
    "imdb_bf16": lambda f: (
        "recipe=imdb",
        f"data_dir={f['imdb']}",
        "download=false",
        "maxlen=64",
        "batch_size=16",
        "precision=bf16-mixed",
    ),
    "images_8_devices": lambda f: (
        "recipe=images",
        f"data.path={f['images']}",
        "data.image_size=16",
        "net=user_nets.PixelNet",
        "model.net.classes=4",
        "devices=8",
        "batch_size=8",
    ),
}


@pytest.mark.parametrize("case", TRAINED)
def test_every_recipe_and_a_users_folder_train_on_each_runtime(case, runtime, cifar_root, imdb_root, images, tmp_path):
    """One training program and one validation program, compiled in epoch 1; the held-out test after."""
    args = TRAINED[case]({"cifar": cifar_root, "imdb": imdb_root, "images": images})
    devices = 8 if "devices=8" in args else 1
    out = run_cli(
        "fit",
        *args,
        runtime_key(runtime),
        "accelerator=xla",
        "epochs=1",
        "trainer.limit_val_batches=2",
        cwd=tmp_path,
        devices=devices,
    ).stdout
    assert f"runtime: {runtime}\n" in out and f"xla, {devices} device(s))" in out, out[-3000:]
    assert "compiled graphs by phase: train 1 (" in out and ", validate 1 (" in out, out[-3000:]
    assert "test accuracy" in out, out[-3000:]
    if "precision=bf16-mixed" in args:
        assert "precision: bf16-mixed" in out, out[-3000:]
