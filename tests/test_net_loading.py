"""A checkpoint loads only into the net it records, with every weight it holds and nothing else, and a grey net
reads an RGB array as PIL makes it grey: through load_for_inference, predict, serve and export alike."""

import numpy as np
import pytest
import torch
from PIL import Image

import user_nets
from helpers import save_checkpoint
from xla_train.checkpoint import atomic_save
from xla_train.cli.main import main
from xla_train.errors import CheckpointError
from xla_train.models.reference import NetRef
from xla_train.preprocess.images import images_to_tensor
from xla_train.serve.inputs import read_images
from xla_train.serve.predictor import load_for_inference

INFO = {"kind": "image", "labels": ["cat", "dog", "fox", "owl"], "image_size": 16, "mean": [0.5] * 3, "std": [0.25] * 3}
ARGS = {"classes": 4, "channels": 3, "width": 8}


def pixel_checkpoint(path, change=None, info=INFO, args=ARGS):
    """A checkpoint of user_nets.PixelNet as fit writes one, its weights first changed by `change(state)` if given."""
    torch.manual_seed(0)
    net = user_nets.PixelNet(**args)
    if change is None:
        return save_checkpoint(path, net, args, info)
    state = net.state_dict()
    change(state)
    block = {**NetRef.of(user_nets.PixelNet, args).block(), **info}
    atomic_save({"state_dict": {f"net.{k}": v for k, v in state.items()}, "xla_train": block}, path)
    return path


def commands(ckpt, net: str, folder) -> dict[str, list[str]]:
    """Every command that loads a checkpoint for inference, each set so that a load that passed would still end in
    exit code 2 with a line of its own (serve's port 1), so a test never starts a server."""
    image = folder / "x.png"
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(image)
    common = [f"ckpt={ckpt}", f"net={net}"]
    return {
        "predict": ["predict", *common, f"inputs={image}"],
        "serve": ["serve", *common, "port=1"],
        "export": ["export", *common, "format=pt2", f"out={folder / 'out.pt2'}"],
    }


def one_line(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2, argv
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "", (argv, captured)
    return lines[0]


# --- the class the checkpoint records ----------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["class", "class path"])
def test_a_class_other_than_the_recorded_one_is_refused_and_never_built(tmp_path, given):
    """PixelTwin has PixelNet's weights by name and shape: were it built, the checkpoint would load into it."""
    ckpt = pixel_checkpoint(tmp_path / "pixel.ckpt")
    user_nets.PixelTwin.built = 0
    with pytest.raises(CheckpointError) as e:
        load_for_inference(ckpt, net=user_nets.PixelTwin if given == "class" else "user_nets.PixelTwin")
    assert str(e.value) == (
        f"{ckpt} was trained with the net user_nets.PixelNet, but net= names user_nets.PixelTwin; "
        f"name the class it was trained with"
    )
    assert user_nets.PixelTwin.built == 0
    assert load_for_inference(ckpt, net=user_nets.PixelNet).net_name == "user_nets.PixelNet"  # the recorded one


def test_every_command_refuses_a_class_other_than_the_recorded_one_in_one_line(tmp_path, capsys):
    ckpt = pixel_checkpoint(tmp_path / "pixel.ckpt")
    user_nets.PixelTwin.built = 0
    for command, argv in commands(ckpt, "user_nets.PixelTwin", tmp_path).items():
        line = one_line(argv, capsys)
        assert line == (
            f"xla_train: error: {ckpt} was trained with the net user_nets.PixelNet, but net= names "
            f"user_nets.PixelTwin; name the class it was trained with"
        ), command
    assert user_nets.PixelTwin.built == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pixel.ckpt", "x.png"]  # nothing written


# --- every weight, and nothing else ------------------------------------------------------------------------------

FAULTS = {
    "missing": (lambda s: s.pop("body.5.bias"), "(the file lacks body.5.bias)"),
    "extra": (lambda s: s.update({"body.9.weight": torch.ones(2)}), "(it holds body.9.weight, which the net has not)"),
    "missing statistics": (
        lambda s: [s.pop(k) for k in ("body.1.running_mean", "body.1.running_var", "body.1.num_batches_tracked")],
        "(the file lacks body.1.running_mean, body.1.running_var, body.1.num_batches_tracked)",
    ),
    "shape": (
        lambda s: s.update({"body.5.bias": torch.zeros(5)}),
        "(size mismatch for body.5.bias: copying a param with shape torch.Size([5]) from checkpoint, "
        "the shape in current model is torch.Size([4]).)",
    ),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_weights_that_do_not_load_strictly_are_refused_by_load_for_inference(tmp_path, fault):
    change, reason = FAULTS[fault]
    ckpt = pixel_checkpoint(tmp_path / "pixel.ckpt", change)
    with pytest.raises(CheckpointError) as e:
        load_for_inference(ckpt, net="user_nets.PixelNet")
    assert str(e.value) == f"{ckpt}: its weights do not fit the user_nets.PixelNet net it names {reason}"


@pytest.mark.parametrize("fault", ["missing", "extra"])
def test_every_command_refuses_weights_that_do_not_load_strictly_in_one_line(tmp_path, capsys, fault):
    change, reason = FAULTS[fault]
    ckpt = pixel_checkpoint(tmp_path / "pixel.ckpt", change)
    for command, argv in commands(ckpt, "user_nets.PixelNet", tmp_path).items():
        line = one_line(argv, capsys)
        assert line == (
            f"xla_train: error: {ckpt}: its weights do not fit the user_nets.PixelNet net it names {reason}"
        ), command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pixel.ckpt", "x.png"]


# --- a grey net and an RGB array ---------------------------------------------------------------------------------


def _pixels_pil_rounds_apart() -> np.ndarray:
    """RGB pixels whose grey a float 0.299/0.587/0.114 product rounds otherwise than PIL's convert("L") does,
    then random ones: (2, 16, 16, 3) uint8."""
    rgb = np.stack(np.meshgrid(*[np.arange(0, 256, 3)] * 3, indexing="ij"), -1).reshape(-1, 3).astype(np.uint8)
    pil = np.asarray(Image.fromarray(rgb[None]).convert("L"))[0]
    product = (rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)).round().astype(np.uint8)
    apart = rgb[pil != product]
    assert len(apart) >= 64
    rest = np.random.default_rng(0).integers(0, 256, (512 - 64, 3), dtype=np.uint8)
    return np.concatenate([apart[:64], rest]).reshape(2, 16, 16, 3)


def test_a_grey_net_reads_an_rgb_array_as_pil_makes_the_same_picture_grey(tmp_path, capsys):
    """A net trained on grey images (an MNIST-like (N, H, W) array) is given RGB pictures as a .npy and as PNG files:
    both reach it as PIL's "L" makes them grey, and predict answers the same for each, as the net run on them."""
    info = {**INFO, "mean": [0.45], "std": [0.2]}
    ckpt = pixel_checkpoint(tmp_path / "grey.ckpt", info=info, args={**ARGS, "channels": 1})
    rgb = _pixels_pil_rounds_apart()
    np.save(tmp_path / "rgb.npy", rgb)
    for i, picture in enumerate(rgb):
        Image.fromarray(picture).save(tmp_path / f"{i}.png")
    grey = np.stack([np.asarray(Image.fromarray(p).convert("L"))[..., None] for p in rgb])

    _, from_array = read_images([str(tmp_path / "rgb.npy")], 16, channels=1)
    _, from_files = read_images([str(tmp_path / "0.png"), str(tmp_path / "1.png")], 16, channels=1)
    np.testing.assert_array_equal(from_array, grey)
    np.testing.assert_array_equal(from_files, grey)

    predictor = load_for_inference(ckpt, net=user_nets.PixelNet)
    with torch.no_grad():
        direct = torch.softmax(predictor.model(images_to_tensor(grey, info["mean"], info["std"])), 1)
    assert torch.equal(predictor.probabilities(from_array), direct)
    capsys.readouterr()
    inputs = f"inputs={tmp_path / 'rgb.npy'},{tmp_path / '0.png'},{tmp_path / '1.png'}"
    assert main(["predict", f"ckpt={ckpt}", "net=user_nets.PixelNet", inputs, "--probs"]) == 0
    rows = [line.split("\t", 1)[1] for line in capsys.readouterr().out.strip().splitlines()]
    assert rows[:2] == rows[2:]  # the array's two pictures answer as their PNG files
