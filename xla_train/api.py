"""xla_train from Python, for notebooks: the CLI's commands as functions.

Keyword arguments become the key=value pairs the command line takes, in the same
run spec (config/run_spec.py, with an instance or arrays as objects), and go
through the same recipe lookup, key checks and LightningCLI (config/build.py),
so `fit(recipe="cifar10", epochs=3)` and `python -m xla_train recipe=cifar10
epochs=3` resolve the same config and write the same run folder. A wrong keyword
raises the error whose one-line message the CLI would print. Keys with dots go
through a dict: `fit(recipe="cifar10_resnet", **{"model.net.depth": 56})`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from xla_train.errors import ConfigError, UserError, find_user_error
from xla_train.run import Run

SPLITS = {"test": "test", "val": "validate"}


def fit(
    recipe: str | None = None,
    *,
    net=None,
    x=None,
    y=None,
    validation_data=None,
    test_data=None,
    data=None,
    **settings,
) -> Run:
    """Train a recipe, as `python -m xla_train fit recipe=... key=value ...` does; returns its run.

    Your own model and data (docs/own_model.md): `net` is an nn.Module instance, its class, or a class path;
    `x`, `y` (and `validation_data=(x, y)`, `test_data=(x, y)`) are arrays in memory (recipe "arrays"); `data` is
    a folder of class folders or a file (.npz, .csv; recipe "images", "texts" or "arrays" by what it holds)."""
    started = time.perf_counter()  # the run's clock: the end-of-fit time line starts at this call
    recipe, instance, arrays, settings = _own(recipe, net, x, y, validation_data, test_data, data, settings)
    cli = _lightning("fit", recipe, settings, instance, arrays, started)
    trainer = cli.trainer
    best, last = trainer.checkpoint_callback.best_model_path, cli.last_checkpoint.path
    # absolute, so that the run is still found after the notebook changes its working directory
    return Run(
        Path(trainer.log_dir).resolve(),
        cli.setting("recipe_name"),
        str(Path(best).resolve()) if best else None,
        str(Path(last).resolve()) if last else None,
    )


def evaluate(run_or_checkpoint, split: str = "test", *, net=None, data=None, **settings) -> dict[str, float]:
    """Metrics of a run's best checkpoint (or of a checkpoint file) on the test or validation split.

    The run's own saved config supplies the recipe and the settings it was trained with (data
    folder, vocabulary, ...); keyword settings override them, as key=value does on the CLI. Like the
    validate and test commands, it files its config and metrics with the run it measured, in the run's
    eval_K folder (config/run_loggers.py), never as a new version_N that would look like a training run.
    A checkpoint of your own net needs `net` (its class, class path or an instance); `data` points a run whose
    data were arrays in memory at a file or folder to evaluate on.
    """
    from xla_train.training.run_folder import RunFolder

    if split not in SPLITS:
        raise ConfigError(f"split={split!r}; use split='test' or split='val'")
    if isinstance(run_or_checkpoint, Run):
        ckpt, folder = run_or_checkpoint.checkpoint, run_or_checkpoint.folder
    else:
        ckpt = str(run_or_checkpoint)
        run = RunFolder.of_checkpoint(ckpt)
        folder = run.path if run is not None else Path(ckpt).resolve().parent
    recipe = settings.pop("recipe", None)
    if recipe is None:
        if not RunFolder(folder).is_run():
            raise ConfigError(
                f"{ckpt} is not inside a run folder with a config.yaml; give recipe=NAME and the "
                f"settings it was trained with"
            )
        recipe = str(RunFolder(folder).config)
    _, instance, _, settings = _own(recipe, net, None, None, None, None, data, settings)
    cli = _lightning(SPLITS[split], recipe, {"ckpt_path": ckpt, **settings}, instance)
    return {k: v for k, v in cli.model.epoch_metrics.items() if k.startswith(split + "_")}


def predict_split(
    run_or_checkpoint, split: str = "test", out=None, probs: bool = False, *, net=None, **settings
) -> Path:
    """Predict a whole split of the checkpoint's own data, as `python -m xla_train predict ckpt=... split=...`
    does: on accelerator= and devices= (auto by default), every sample once and in order; returns the CSV
    (index, label, predicted, probability, and with probs=True one p_<label> column per class).
    Settings: accelerator, devices, batch_size, data_dir. A checkpoint of your own net needs `net` (its class, class
    path or an instance)."""
    from xla_train.cli.keys import read_keys
    from xla_train.cli.predict import predict_split as command  # its signature is the keys
    from xla_train.config.saved_run import predict_split as run

    ckpt = run_or_checkpoint.checkpoint if isinstance(run_or_checkpoint, Run) else str(run_or_checkpoint)
    given = {"ckpt": ckpt, "split": split, "out": out, "probs": probs, **settings}
    kwargs = read_keys(command, {k: _cli_value(v) for k, v in given.items() if v is not None}, prog="predict_split")
    return _raising(lambda: run(**{**kwargs, "net": net})[0])


def serve(run_or_checkpoint, **settings) -> int:
    """Serve a checkpoint over HTTP, as `python -m xla_train serve ckpt=...` does, until SIGTERM or Ctrl+C (it
    blocks; in a notebook, run it in a subprocess). Settings: host, port, max_batch_size, batch_timeout, workers,
    max_body_mb, body_timeout, and for your own net net= (its class path or class: the worker processes import it)
    with net_args= (a dict) where the checkpoint records no init arguments. Returns 0 once the requests in flight are
    answered."""
    from xla_train.cli.keys import read_keys
    from xla_train.cli.serve import serve as command  # its signature is the keys

    ckpt = run_or_checkpoint.checkpoint if isinstance(run_or_checkpoint, Run) else str(run_or_checkpoint)
    if isinstance(settings.get("net"), type):
        from xla_train.models.reference import class_path_of

        settings["net"] = class_path_of(settings["net"])
    given = {"ckpt": ckpt, **settings}
    kwargs = read_keys(command, {k: _cli_value(v) for k, v in given.items() if v is not None}, prog="serve")
    return _raising(lambda: command(**kwargs))


def devices(accelerator: str = "auto", runtime: str = "auto"):
    """The devices accelerator= would train on; `auto` finds a TPU, then a GPU, then the CPU. On XLA, runtime= picks
    torch_xla or jax; auto reports both where both are installed."""
    from xla_train.runtime.devices import describe_devices

    return _raising(describe_devices, accelerator, runtime)


def benchmark(subcommand: str = "sweep", **settings) -> Path:
    """Run a benchmark as `python -m xla_train bench SUBCOMMAND key=value ...`; returns its results folder
    (a Markdown table, a CSV and PNG charts)."""
    from xla_train.cli.bench import SUBCOMMANDS, run_bench

    if subcommand not in SUBCOMMANDS:
        raise ConfigError(f"bench subcommand {subcommand!r}; use one of {', '.join(SUBCOMMANDS)}")
    argv = [subcommand] + [f"{k}={_cli_value(v)}" for k, v in settings.items()]
    code, results = _raising(run_bench, argv)
    if code != 0:
        raise UserError(f"the benchmark failed; see {results or 'its output above'}")
    return results


def _lightning(command: str, recipe, settings: dict, net=None, arrays=None, started: float | None = None):
    """The run's spec (config/run_spec.py) as the command line's pairs make it, with Python's objects in it."""
    from xla_train.config.build import run_lightning
    from xla_train.config.run_spec import RunSpec

    if "recipe" in settings:
        raise ConfigError("give the recipe once, as the first argument")
    pairs = {"recipe": str(recipe), **{k: _cli_value(v) for k, v in settings.items()}}
    return _raising(lambda: run_lightning(RunSpec.parse(command, pairs, net=net, arrays=arrays, started=started)))


def _own(recipe, net, x, y, validation_data, test_data, data, settings: dict) -> tuple:
    """(recipe, the net if an instance, arrays, settings) from fit's own-model keywords: a class or builder goes as
    its path; arrays in memory pick recipe "arrays"; a folder or file picks its recipe by what it holds."""
    from xla_train.data.folders import recipe_for

    settings, instance, arrays = dict(settings), None, None
    if net is not None:
        instance = _net_setting(net, settings)
    if x is not None or y is not None:
        if x is None or y is None or data is not None:
            raise ConfigError("give the training arrays as x= and y= together (or data= a folder or file, not both)")
        arrays = {"x": x, "y": y, "validation_data": validation_data, "test_data": test_data}
        recipe = recipe or "arrays"
    elif validation_data is not None or (test_data is not None and data is None):
        raise ConfigError("validation_data= and test_data= come with the arrays x= and y=")
    elif data is not None:
        found, path = recipe_for(data)
        recipe = recipe or found
        settings["data.path"] = str(path)
        if test_data is not None:  # a CSV's test rows
            settings["data.test"] = str(test_data)
    if recipe is None:
        raise ConfigError(
            "which recipe? give one (fit('cifar10')), or your data: fit(net=..., x=..., y=...) or fit(net=..., data=PATH)"
        )
    return recipe, instance, arrays, settings


def _net_setting(net, settings: dict):
    """net= as the instance the spec takes as it is, or as model.net.class_path (a class, a builder or its path: the
    spec imports it once, as for the command line, so a class it cannot import again is refused alike); else None."""
    from torch import nn

    from xla_train.models.reference import class_path_of, is_builder

    if isinstance(net, nn.Module):
        return net
    if (isinstance(net, type) and issubclass(net, nn.Module)) or is_builder(net):
        net = class_path_of(net)
    if not isinstance(net, str):
        raise ConfigError(
            f"net= takes an nn.Module, its class, a function that builds it, or an import path; not {type(net).__name__}"
        )
    settings["model.net.class_path"] = net
    return None


def _raising(fn, *args):
    """Call fn; our own error comes out as itself even when jsonargparse or Lightning wrapped it."""
    try:
        return fn(*args)
    except UserError:
        raise
    except Exception as e:
        error = find_user_error(e)
        if error is None:
            raise
        raise error from None


def _cli_value(value) -> str:
    """A Python value as the command line would spell it (YAML reads JSON for lists and mappings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (str, Path)):
        return str(value)
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)
