"""A net is a class, a builder (a function that returns it: torchvision.models.resnet18, a create_model() as the
Keras tutorials write it) or an instance; its init arguments may be classes, recorded as import paths and imported
again only from torch, torchvision, timm or the net's own module."""

import base64
import json

import lightning.pytorch  # noqa: F401  its log handlers keep the sys.stderr of their import: not a capsys stream
import numpy as np
import pytest
import torch
from PIL import Image

import user_nets
import xla_train
from helpers import TESTS, cli_env, path_with_tests, run_cli, runtime_key
from serving import Server, request
from xla_train.checkpoint import atomic_save, safe_load
from xla_train.cli.main import main
from xla_train.errors import CheckpointError, ConfigError
from xla_train.models.reference import NetRef

LABELS = ["cat", "dog", "fox", "owl"]
MODES = ("RGB", "L", "RGBA", "RGB")  # grey and RGBA among them, decoded to RGB as training reads every image


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory):
    """DIR/train|test/CLASS/*: PNG and JPEG, sizes 20-44 pixels, RGB, grey and RGBA; each class its own colour."""
    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(0)
    colours = np.array([[220, 40, 40], [40, 200, 40], [40, 40, 220], [230, 230, 230]])
    for split, n in (("train", 32), ("test", 4)):
        for c, label in enumerate(LABELS):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                h, w = 20 + 8 * (i % 4), 24 + 4 * (i % 5)
                pixels = np.clip(colours[c] + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)
                image = Image.fromarray(pixels).convert(MODES[i % 4])
                image.save(root / split / label / (f"{i}.jpg" if i % 3 == 0 and image.mode != "RGBA" else f"{i}.png"))
    return root


def predicted_labels(argv, capsys) -> list[str]:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out.strip().splitlines()


@pytest.fixture(scope="module")
def resnet_run(mixed_folder, tmp_path_factory):
    work = tmp_path_factory.mktemp("resnet18")
    import torchvision

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        torch.manual_seed(0)
        run = xla_train.fit(
            data=str(mixed_folder),
            net=torchvision.models.resnet18,  # the builder itself; its path, on the command line
            accelerator="cpu",
            epochs=2,
            batch_size=8,
            lr=0.003,
            **{"model.net.num_classes": 4, "data.image_size": 32},
        )
    return work, run


def test_torchvision_resnet18_from_its_builder_records_the_builder_and_predicts_class_names(
    resnet_run, mixed_folder, capsys
):
    work, run = resnet_run
    block = safe_load(run.checkpoint)["xla_train"]
    # the builder's own path (torchvision.models.resnet18 is defined in torchvision.models.resnet), as any name of it
    assert block["class_path"] == "torchvision.models.resnet.resnet18" and block["init_args"]["num_classes"] == 4
    assert block["built_class"] == "torchvision.models.resnet.ResNet" and block["labels"] == LABELS
    argv = ["predict", f"ckpt={run.checkpoint}", f"inputs={mixed_folder / 'test'}", "net=torchvision.models.resnet18"]
    lines = predicted_labels(argv, capsys)
    assert len(lines) == 17 and all(line.split("\t")[1] in LABELS for line in lines[:-1])
    right = int(lines[-1].split("(")[1].split(" of ")[0])
    assert right >= 10, lines  # four colours, 4 of 16 by chance: the net tells them apart (11-16 seen across CPUs)
    predictor = xla_train.load_for_inference(run.checkpoint, net="torchvision.models.resnet18")
    assert type(predictor.model).__name__ == "ResNet"


def test_the_resnet18_checkpoint_is_tested_and_splits_predicted_with_the_arguments_it_trained_with(
    resnet_run, monkeypatch
):
    """The run's config records no net (a builder's run); the builder is called with the checkpoint's arguments."""
    from xla_train import api

    work, run = resnet_run
    monkeypatch.chdir(work)
    net = "torchvision.models.resnet18"
    metrics = xla_train.evaluate(run.checkpoint, "test", net=net, accelerator="cpu", precision="32-true")
    table = api.predict_split(run.checkpoint, split="test", net=net, accelerator="cpu", out=work / "t.csv")
    rows = table.read_text().strip().splitlines()[1:]
    right = sum(r.split(",")[1] == r.split(",")[2] for r in rows)
    assert len(rows) == 16 and metrics["test_acc"] == pytest.approx(right / 16)


def test_the_resnet18_checkpoint_serves_class_names(resnet_run, mixed_folder):
    work, run = resnet_run
    server = Server(run.checkpoint, work, "net=torchvision.models.resnet18", "workers=1")
    try:
        server.wait_ready(timeout=120)
        image = next((mixed_folder / "test" / "fox").glob("*.png"))
        body = json.dumps({"image": base64.b64encode(image.read_bytes()).decode()})
        status, answer = request(server.port, "POST", "/predict", body)
        assert status == 200 and answer["class"] in LABELS, answer
    finally:
        server.stop()


def test_a_builder_from_another_module_or_with_other_arguments_is_refused_in_one_line(resnet_run, capsys):
    _, run = resnet_run
    with pytest.raises(CheckpointError) as e:
        xla_train.load_for_inference(run.checkpoint, net="torchvision.models.resnet34")
    assert (
        "trained with the net torchvision.models.resnet.resnet18, but net= names torchvision.models.resnet.resnet34"
        in (str(e.value))
    )
    assert main(["predict", f"ckpt={run.checkpoint}", "inputs=x.png", "net=torchvision.models.resnet18"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["xla_train: error: input x.png does not exist"]  # the net loaded; the input is what is missing


def test_a_create_model_function_trains_on_eight_xla_devices_and_predicts_as_itself(mixed_folder, tmp_path, runtime):
    """No annotations (jsonargparse alone would refuse it): xla_train calls it once the seed is set."""
    run_cli(
        *("fit", "recipe=images", f"data.path={mixed_folder}", "net=user_nets.create_model", "model.net.width=6"),
        *("data.image_size=16", "accelerator=xla", "devices=8", "batch_size=8", "epochs=1", runtime_key(runtime)),
        cwd=tmp_path,
        devices=8,
        env=cli_env(8, PYTHONPATH=path_with_tests()),
    )
    ckpt = tmp_path / "runs" / "images" / "version_0" / "checkpoints" / "last.ckpt"
    block = safe_load(ckpt)["xla_train"]
    assert (block["class_path"], block["init_args"]) == ("user_nets.create_model", {"classes": 4, "width": 6})
    predictor = xla_train.load_for_inference(ckpt, net=user_nets.create_model)
    torch.manual_seed(0)
    net = user_nets.create_model(width=6)
    net.load_state_dict({k[4:]: v for k, v in safe_load(ckpt)["state_dict"].items()})
    images = np.random.default_rng(1).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8)
    x = predictor.preprocess(images)
    with torch.no_grad():
        torch.testing.assert_close(predictor.probabilities(images), torch.softmax(net.eval()(x), 1))


def test_a_builder_that_takes_no_such_argument_is_one_line(mixed_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "recipe=images", f"data.path={mixed_folder}", "net=user_nets.create_model", "model.net.widht=6"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "xla_train: error: user_nets.create_model takes no argument 'widht'; did you mean width?\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("net", ["user_nets.PixelNet", "user_nets.create_model"])
def test_the_net_a_run_names_is_imported_once(net, monkeypatch):
    """A class or builder path is resolved once per run (config/run_spec.py), and the object handed on: the recipe's
    keys, the builder's call and the checkpoint's name do not import it again (jsonargparse builds a class from its
    path by itself)."""
    import importlib

    from xla_train.config.build import build_parts

    imported, real = [], importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name) or real(name, *a))
    model, _ = build_parts("quickstart", {"net": net, "model.net.width": "6"})
    assert imported.count("user_nets") == 1, imported
    assert (model.net_reference().class_path, model.net_reference().init_args["width"]) == (net, 6)


# --- arguments that are classes ----------------------------------------------------------------------------------


def test_a_class_argument_is_recorded_as_its_path_and_built_again_from_it(mixed_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = xla_train.fit(
        data=str(mixed_folder),
        net="user_nets.Stacked",
        accelerator="cpu",
        epochs=1,
        **{"model.net.block": "user_nets.Residual", "data.image_size": 16},
    )
    block = safe_load(run.checkpoint)["xla_train"]
    assert block["init_args"] == {"block": {"import": "user_nets.Residual"}, "width": 8, "classes": 4}
    predictor = xla_train.load_for_inference(run.checkpoint, net=user_nets.Stacked)
    assert isinstance(predictor.model.block, user_nets.Residual)


def forged(tmp_path, block_path: str):
    """A checkpoint of user_nets.Stacked whose recorded block argument names `block_path`."""
    net = user_nets.Stacked()
    info = {"kind": "image", "labels": LABELS, "image_size": 16, "mean": [0.5] * 3, "std": [0.25] * 3}
    ref = NetRef("user_nets.Stacked", {"block": {"import": block_path}, "width": 8, "classes": 4})
    state = {f"net.{k}": v for k, v in net.state_dict().items()}
    atomic_save({"state_dict": state, "xla_train": {**ref.block(), **info}}, tmp_path / "stacked.ckpt")
    return tmp_path / "stacked.ckpt"


def test_a_recorded_class_outside_trusted_modules_is_never_imported_unless_the_user_names_it(tmp_path, capsys):
    ckpt = forged(tmp_path, "elsewhere.blocks.Residual")  # were it imported, the error would say it cannot be
    with pytest.raises(CheckpointError) as e:
        xla_train.load_for_inference(ckpt, net=user_nets.Stacked)
    assert str(e.value) == (
        f"{ckpt} names elsewhere.blocks.Residual as the init argument 'block'; xla_train imports what a file names "
        f"only from torch, torchvision, timm or the net's own module (user_nets); give it yourself: "
        f"model.net.init_args.block=elsewhere.blocks.Residual (in Python, args={{'block': ...}})"
    )
    # named by the user, on the command line: imported on the user's word
    argv = ["predict", f"ckpt={ckpt}", "net=user_nets.Stacked", "model.net.init_args.block=user_nets.Residual"]
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / "x.png")
    assert main([*argv, f"inputs={tmp_path / 'x.png'}"]) == 0
    assert capsys.readouterr().out.split("\t")[1] in LABELS


# --- a net given to fit as an instance ---------------------------------------------------------------------------


def test_cli_predict_after_fit_with_an_instance_builds_the_named_class_from_its_defaults(
    mixed_folder, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    run = xla_train.fit(
        data=str(mixed_folder), net=user_nets.PixelNet(width=6), accelerator="cpu", epochs=1, **{"data.image_size": 16}
    )
    image = next((mixed_folder / "test" / "owl").glob("*.png"))
    argv = ["predict", f"ckpt={run.checkpoint}", f"inputs={image}", "net=user_nets.PixelNet"]
    assert main(argv) == 2  # PixelNet() is width 8: the file says why it cannot tell
    err = capsys.readouterr().err
    assert "built from its defaults: the file records no init arguments (fit was given an instance" in err
    assert "give them as model.net.init_args.NAME=value (size mismatch for body.0.weight" in err
    assert err.count("\n") == 1
    assert main([*argv, "model.net.init_args.width=6"]) == 0
    assert capsys.readouterr().out.split("\t")[1] in LABELS


def test_arguments_that_cannot_be_recorded_say_why():
    ref = NetRef.of(user_nets.PixelNet, {"classes": 4, "width": torch.tensor(8)})
    assert ref.init_args is None and ref.no_args == "its argument 'width' is a Tensor, not a plain value"
    assert NetRef.of(user_nets.PixelNet).no_args == "fit was given an instance, whose arguments are its own"


def test_fit_refuses_a_builder_that_returns_no_net(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        xla_train.fit(net=len, x=np.zeros((40, 4), np.float32), y=np.arange(40) % 2, accelerator="cpu")
    assert "builtins.len" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_docs_show_builders_and_pretrained_weights():
    text = (TESTS.parent / "docs" / "own_model.md").read_text()
    assert "## Builders and pretrained weights" in text and "torchvision.models.resnet18" in text


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 8])
def test_torchvision_resnet18_from_its_builder_trains_on_xla(devices, mixed_folder, tmp_path, capsys):
    """The same builder on XLA:CPU, one device and eight under SPMD (about 40 s and 1.8 GB for one device)."""
    run_cli(
        *("fit", "recipe=images", f"data.path={mixed_folder}", "net=torchvision.models.resnet18"),
        *("model.net.num_classes=4", "data.image_size=32", "accelerator=xla", f"devices={devices}", "epochs=1"),
        "batch_size=8",
        cwd=tmp_path,
        devices=devices,
    )
    ckpt = tmp_path / "runs" / "images" / "version_0" / "checkpoints" / "last.ckpt"
    argv = ["predict", f"ckpt={ckpt}", f"inputs={mixed_folder / 'test'}", "net=torchvision.models.resnet18"]
    lines = predicted_labels(argv, capsys)
    assert len(lines) == 17 and all(line.split("\t")[1] in LABELS for line in lines[:-1])
