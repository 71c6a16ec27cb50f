"""`predict inputs=DIR` walks a folder tree, as training reads DIR/train/CLASS/*: every file once, in path order,
and when the subfolders are the checkpoint's class names an accuracy line follows the predictions."""

import numpy as np
import pytest
from PIL import Image

import user_nets
from helpers import save_checkpoint
from serving import write_checkpoint
from xla_train.cli.main import main
from xla_train.serve.predictor import load_for_inference
from xla_train.serve.inputs import read_images

LABELS = ["cat", "dog", "fox", "owl"]
INFO = {"kind": "image", "labels": LABELS, "image_size": 8, "mean": [0.5] * 3, "std": [0.25] * 3}


@pytest.fixture
def tree(tmp_path):
    """DIR/test/CLASS/*.png (3 of each class, sizes and modes mixed) and DIR/train/CLASS/*.png; a hidden folder."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c in LABELS:
            (tmp_path / "images" / split / c).mkdir(parents=True)
            for i in range(3):
                pixels = rng.integers(0, 256, (8 + 4 * i, 8, 3), dtype=np.uint8)
                image = Image.fromarray(pixels).convert("L" if i == 2 else "RGB")
                image.save(tmp_path / "images" / split / c / (f"{i}.jpg" if i == 1 else f"{i}.png"))
    (tmp_path / "images" / "test" / ".cache").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "images" / "test" / ".cache" / "x.png")
    return tmp_path / "images"


def predicted(argv, capsys) -> list[str]:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out.strip().splitlines()


def test_predict_on_a_class_folder_tree_prints_every_file_and_the_accuracy(tree, tmp_path, capsys):
    ckpt = save_checkpoint(tmp_path / "m.ckpt", user_nets.PixelNet(), {}, INFO)
    lines = predicted(["predict", f"ckpt={ckpt}", f"inputs={tree / 'test'}", "net=user_nets.PixelNet"], capsys)
    files = sorted((tree / "test").glob("[!.]*/*"))
    assert [line.split("\t")[0] for line in lines[:-1]] == [str(f) for f in files] and len(files) == 12
    predictor = load_for_inference(ckpt, net=user_nets.PixelNet)
    _, images = read_images([str(f) for f in files], 8)
    top = predictor.probabilities(images).argmax(1).numpy()
    right = int((top == np.repeat(np.arange(4), 3)).sum())
    assert lines[-1] == f"accuracy {right / 12:.4f} ({right} of 12; each input's class is its folder's name)"


def test_a_tree_whose_folders_are_not_the_classes_is_predicted_without_an_accuracy(tree, tmp_path, capsys):
    ckpt = save_checkpoint(tmp_path / "m.ckpt", user_nets.PixelNet(), {}, INFO)
    lines = predicted(["predict", f"ckpt={ckpt}", f"inputs={tree}", "net=user_nets.PixelNet"], capsys)
    assert len(lines) == 24 and all(line.count("\t") == 2 for line in lines)  # train/ and test/: no class folders


def test_texts_in_class_folders_get_an_accuracy_too(tmp_path, capsys):
    ckpt = write_checkpoint(tmp_path / "lstm.ckpt", "lstm")
    for label, words in (("neg", "awful boring"), ("pos", "wonderful superb")):
        (tmp_path / "reviews" / label).mkdir(parents=True)
        for i in range(2):
            (tmp_path / "reviews" / label / f"{i}.txt").write_text(f"a {words} film number {i}")
    lines = predicted(["predict", f"ckpt={ckpt}", f"inputs={tmp_path / 'reviews'}"], capsys)
    assert len(lines) == 5 and lines[-1].startswith("accuracy ")
    assert lines[-1].endswith(" of 4; each input's class is its folder's name)")
