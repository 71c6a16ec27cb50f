"""An image checkpoint's channel statistics are the ones its net trained with: validate, test, a split's prediction
and resume use the checkpoint's, never statistics measured afresh from a folder that has changed since."""

import csv

import numpy as np
import pytest
import torch
from PIL import Image

import user_nets
import xla_train
from xla_train import api
from xla_train.checkpoint import safe_load
from xla_train.config.saved_run import split_data
from xla_train.data.image_base import channel_mean_std
from xla_train.preprocess.images import decode_image
from xla_train.serve.predictor import load_for_inference

CLASSES = ["cat", "dog", "fox", "owl"]
SETTINGS = {"accelerator": "cpu", "batch_size": 8, "data.image_size": 8}


def write_folder(root, train: int = 12, test: int = 4):
    """DIR/train|test/CLASS/*.png, 8x8 RGB, each class a brightness the net can tell apart."""
    rng = np.random.default_rng(0)
    for split, n in (("train", train), ("test", test)):
        for c, name in enumerate(CLASSES):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = np.clip(rng.normal(60 * c, 30, (8, 8, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def train_pixels(root) -> np.ndarray:
    return np.stack([decode_image(f, 8, str(f)) for f in sorted((root / "train").glob("*/*.png"))])


@pytest.fixture(scope="module")
def changed_run(tmp_path_factory):
    """A run of user_nets.PixelNet on a folder; afterwards the folder's training images are inverted (the test
    images stay), so statistics measured from it now would differ from the checkpoint's."""
    work = tmp_path_factory.mktemp("image_statistics")
    root = write_folder(work / "images")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        run = xla_train.fit(data=str(root), net=user_nets.PixelNet, epochs=1, test_after_fit=False, **SETTINGS)
        before = xla_train.evaluate(
            run.last_checkpoint, "test", net=user_nets.PixelNet, accelerator="cpu", precision="32-true"
        )
    trained = safe_load(run.last_checkpoint)["xla_train"]
    assert [trained["mean"], trained["std"]] == list(channel_mean_std(train_pixels(root)))
    for f in (root / "train").glob("*/*.png"):
        Image.fromarray(255 - np.asarray(Image.open(f))).save(f)
    assert list(channel_mean_std(train_pixels(root))) != [trained["mean"], trained["std"]]
    return work, root, run, trained, before


def test_test_and_validate_read_the_changed_folder_with_the_checkpoints_statistics(changed_run, monkeypatch):
    work, _, run, _, before = changed_run
    monkeypatch.chdir(work)
    ckpt = run.last_checkpoint
    assert xla_train.evaluate(ckpt, "test", net=user_nets.PixelNet, accelerator="cpu", precision="32-true") == before
    # validate: the inverted training images of the validation share, normalised as training normalised them,
    # whose loss the CPU predictor (the checkpoint's statistics) gives as well
    val = xla_train.evaluate(ckpt, "val", net=user_nets.PixelNet, accelerator="cpu", precision="32-true")
    _, images, labels = split_data(ckpt, "val", net=user_nets.PixelNet)
    probs = load_for_inference(ckpt, net=user_nets.PixelNet).probabilities(images)
    expected = torch.nn.functional.nll_loss(probs.log(), torch.from_numpy(labels)).item()
    assert val["val_loss"] == pytest.approx(expected, abs=1e-4)


def test_a_split_prediction_is_the_checkpoints_own(changed_run, monkeypatch):
    work, root, run, _, _ = changed_run
    monkeypatch.chdir(work)
    out = work / "test.csv"
    api.predict_split(run.last_checkpoint, split="test", net=user_nets.PixelNet, accelerator="cpu", out=out, probs=True)
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    files = sorted((root / "test").glob("*/*.png"))
    images = np.stack([decode_image(f, 8, str(f)) for f in files])
    reference = load_for_inference(run.last_checkpoint, net=user_nets.PixelNet).probabilities(images).numpy()
    got = np.array([[float(r[f"p_{c}"]) for c in CLASSES] for r in rows])
    np.testing.assert_allclose(got, reference, atol=1e-4)


def test_resume_keeps_the_checkpoints_statistics(changed_run, monkeypatch):
    work, root, run, trained, _ = changed_run
    monkeypatch.chdir(work)
    resumed = xla_train.fit(
        data=str(root), net=user_nets.PixelNet, epochs=2, ckpt=run.last_checkpoint, test_after_fit=False, **SETTINGS
    )
    block = safe_load(resumed.last_checkpoint)
    assert block["epoch"] == 1
    assert [block["xla_train"]["mean"], block["xla_train"]["std"]] == [trained["mean"], trained["std"]]
    assert torch.equal(torch.tensor(block["xla_train"]["mean"]), torch.tensor(trained["mean"]))
