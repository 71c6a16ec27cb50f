"""The Python API is the CLI by another door: the same resolved config, the same run, the same error messages."""

from __future__ import annotations

import sys

import pytest
import yaml

import xla_train
from helpers import cli_env, run_cli, run_paced
from xla_train.cli.main import main
from xla_train.errors import UserError

# A short CPU fit of the offline recipe; the Python values cover each way a value is spelled on the command line.
SETTINGS = {
    "accelerator": "cpu",
    "epochs": 2,
    "lr": 0.002,
    "test_after_fit": True,
    "predict_samples": 0,
    "limit_train_batches": 6,
    "limit_val_batches": 3,
    "limit_test_batches": 3,
    "progress_every": 50,
    "trainer.enable_model_summary": False,
    "logger": "csv",
    "compile_cache": None,
}


def as_cli_args(settings: dict) -> list[str]:
    spell = {True: "true", False: "false", None: "null"}
    return [f"{k}={spell.get(v, v) if isinstance(v, (bool, type(None))) else v}" for k, v in settings.items()]


@pytest.fixture(scope="module")
def api_and_cli_runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("api")
    import os

    cwd = os.getcwd()
    os.chdir(work)
    try:
        run = xla_train.fit("quickstart", **SETTINGS)
    finally:
        os.chdir(cwd)
    run_cli("fit", "recipe=quickstart", *as_cli_args(SETTINGS), cwd=work)
    return run, xla_train.Run.from_folder(work / "runs" / "quickstart" / "version_1")


def test_fit_through_the_api_and_the_cli_resolve_the_same_config(api_and_cli_runs):
    api, cli = api_and_cli_runs
    assert api.folder.name == "version_0" and api.recipe == cli.recipe == "quickstart"
    config = yaml.safe_load((api.folder / "config.yaml").read_text())
    assert config == yaml.safe_load((cli.folder / "config.yaml").read_text())
    assert config["model"]["lr"] == 0.002 and config["trainer"]["max_epochs"] == 2  # the values arrived typed
    assert config["trainer"]["limit_train_batches"] == 6 and config["compile_cache"] is None
    assert api.config == config


def test_a_run_gives_its_checkpoints_history_and_test_metrics(api_and_cli_runs):
    api, cli = api_and_cli_runs
    assert api.checkpoint == api.best_checkpoint and api.best_checkpoint.endswith(".ckpt")
    assert api.last_checkpoint.endswith("last.ckpt")
    assert [r["epoch"] for r in api.history] == [0, 1]
    for row in api.history:
        assert {"train_loss", "train_acc", "val_loss", "val_acc", "samples_per_s"} <= set(row)
    # same seed, same data, eager CPU: the two doors trained the same model
    for a, c in zip(api.history, cli.history):
        assert a["train_loss"] == pytest.approx(c["train_loss"], rel=1e-6)
        assert a["val_acc"] == c["val_acc"]
    assert set(api.test_metrics) == {"test_loss", "test_acc"}
    frame = api.history_frame()
    assert list(frame.index) == [0, 1] and frame.loc[1, "val_acc"] == api.history[1]["val_acc"]
    assert len(api.plot().axes) == 2


def test_evaluate_a_run_or_a_checkpoint_file(api_and_cli_runs, monkeypatch, tmp_path):
    api, _ = api_and_cli_runs
    monkeypatch.chdir(api.folder.parents[2])
    assert xla_train.evaluate(api) == pytest.approx(api.test_metrics, rel=1e-6)  # the best checkpoint, as after fit
    val = xla_train.evaluate(api.last_checkpoint, split="val")
    assert set(val) == {"val_loss", "val_acc"} and val["val_acc"] == pytest.approx(api.history[-1]["val_acc"])
    # both results are filed with the run they measured (eval_0, eval_1), not as new empty version_N runs
    assert "test_acc" in (api.folder / "eval_0" / "metrics.csv").read_text()
    assert "val_acc" in (api.folder / "eval_1" / "metrics.csv").read_text()
    assert sorted(p.name for p in api.folder.parent.iterdir()) == ["version_0", "version_1"]
    stray = tmp_path / "model.ckpt"
    stray.write_bytes(open(api.last_checkpoint, "rb").read())
    with pytest.raises(UserError, match="not inside a run folder with a config.yaml; give recipe=NAME"):
        xla_train.evaluate(stray)
    with pytest.raises(UserError, match="split='train'"):
        xla_train.evaluate(api, split="train")


@pytest.mark.parametrize(
    "settings",
    [
        {"recipe": "nope"},
        {"recipe": "quickstart", "lrr": 0.1},
        {"recipe": "quickstart", "epochs": "many"},
        {"recipe": "quickstart", "batch_size": 12, "accelerator": "cpu"},
        {"recipe": "quickstart", "accelerator": "quantum"},
        {"recipe": "cifar10", "accelerator": "cpu", "data_dir": "missing", "download": False},
        {"recipe": "quickstart", "ckpt": "missing.ckpt", "accelerator": "cpu"},
    ],
    ids=["recipe", "key", "type", "batch", "accelerator", "data", "checkpoint"],
)
def test_a_bad_keyword_raises_the_message_the_cli_prints(settings, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    settings = dict(settings)
    assert main(["fit", f"recipe={settings['recipe']}", *as_cli_args(settings)[1:]]) == 2
    printed = capsys.readouterr().err.strip().splitlines()[-1]
    with pytest.raises(UserError) as raised:
        xla_train.fit(settings.pop("recipe"), **settings)
    assert printed == f"xla_train: error: {raised.value}"
    assert list(tmp_path.iterdir()) == []


def test_devices_lists_what_each_accelerator_trains_on():
    """XLA devices are counted by a short-lived runtime (this process holds none: on a TPU it would hold the chips)."""
    code = (
        "import sys, xla_train; from xla_train.cli.main import main; cpu = xla_train.devices('cpu'); "
        "assert 'torch_xla' not in sys.modules; xla = xla_train.devices('xla'); "
        "print(cpu.accelerator, cpu.count, xla.accelerator, xla.count, xla.names[-1], xla.hardware); main(['devices'])"
    )
    proc = run_paced([sys.executable, "-c", code], 120, env=cli_env(4))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0].split() == ["cpu", "1", "xla", "4", "xla:3", "CPU"]
    assert out[1].startswith("4 CPU devices (accelerator=xla; PJRT_DEVICE=CPU") and out[5].split() == ["xla:3", "CPU"]
    # the other installed runtime below it, its devices made as CPU_NUM_DEVICES says
    assert out[6].startswith("4 JAX cpu devices (accelerator=xla; runtime=jax") and out[-1].split() == [
        "cpu:3",
        "JAX",
        "cpu",
    ]
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA GPU is visible"):
            xla_train.devices("gpu")
