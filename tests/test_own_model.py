"""A user's own net (tests/user_nets.py, outside xla_train) on a user's own data: arrays through the Python API, a
folder of images under SPMD on 8 devices, a text CSV with a GRU that packs its batch, on either runtime; then
predicted on the CPU as the net itself computes, served, exported, and never imported because a checkpoint names it."""

import csv
import functools
import json
import re
import sys
from pathlib import Path

import lightning.pytorch  # noqa: F401  its log handler keeps the sys.stderr of its import: not a capsys stream
import numpy as np
import pytest
import torch
from PIL import Image

import xla_train
from helpers import SCRIPTS, TESTS, cli_env, path_with_tests, require, run_cli, run_paced, runtime_key, script_json
from xla_train.cli.main import main

CLASSES = ["cat", "dog", "fox", "owl"]
GOOD = "wonderful superb moving brilliant delightful".split()
BAD = "awful boring dreadful terrible tedious".split()
FILLER = "the film plot actor scene story and a of it".split()


def digits(n_per_class: int, classes: int, offset: int = 0):
    """Real handwritten digits 0..classes-1 as uint8 (N, 16, 16) images, n_per_class of each, and their labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    picks = [np.flatnonzero(d.target == c)[offset : offset + n_per_class] for c in range(classes)]
    idx = np.concatenate(picks)
    small = (d.images[idx] * (255 / 16)).round().astype(np.uint8)
    big = np.stack([np.asarray(Image.fromarray(im).resize((16, 16), Image.NEAREST)) for im in small])
    return big, d.target[idx]


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("images"))


def write_image_folder(root: Path) -> Path:
    """DIR/train/CLASS/*.png (40 a class) and DIR/test/CLASS/*.png (8 a class); PNG and JPEG mixed."""
    for split, n, offset in (("train", 40, 0), ("test", 8, 40)):
        images, labels = digits(n, len(CLASSES), offset)
        for i, (im, label) in enumerate(zip(images, labels)):
            folder = root / split / CLASSES[label]
            folder.mkdir(parents=True, exist_ok=True)
            rgb = Image.fromarray(np.stack([im, im // 2, 255 - im], -1))
            rgb.save(folder / (f"{i}.png" if i % 4 else f"{i}.jpg"))
    return root


def review(rng, label: str) -> str:
    words = rng.choice(FILLER + (GOOD if label == "good" else BAD) * 2, int(rng.integers(5, 40)))
    return " ".join(words)


@pytest.fixture(scope="module")
def text_csv(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("texts")
    rng = np.random.default_rng(0)
    for name, n in (("train.csv", 160), ("test.csv", 40)):
        with open(folder / name, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "text", "label"])  # an extra column is ignored
            for i in range(n):
                label = ("bad", "good")[i % 2]  # the test split's row 0, which padding repeats, is class 0
                writer.writerow([i, review(rng, label), label])
    return folder / "train.csv", folder / "test.csv"


@pytest.fixture(scope="module")
def spmd_image_runs(image_folder, tmp_path_factory):
    """fit(runtime) -> (run folder, process, best checkpoint): PixelNet on the image folder on 8 XLA devices, once
    per runtime for the module."""

    @functools.cache
    def fit(runtime: str):
        work = tmp_path_factory.mktemp(f"spmd_images_{runtime}")
        proc = run_cli(
            *("fit", "recipe=images", f"data.path={image_folder}", "data.image_size=16", "net=user_nets.PixelNet"),
            *("model.net.classes=4", "model.net.width=6", "accelerator=xla", "devices=8", "batch_size=8"),
            *("epochs=2", "val_fraction=0.2", runtime_key(runtime)),
            cwd=work,
            devices=8,
        )
        run = work / "runs" / "images" / "version_0"
        return run, proc, max((run / "checkpoints").glob("best-*.ckpt"))

    return fit


@pytest.fixture
def spmd_images(spmd_image_runs, runtime):
    return spmd_image_runs(runtime)


def test_a_folder_smaller_than_one_global_batch_on_8_devices_is_one_line_before_anything_compiles(
    image_folder, tmp_path
):
    """The default batch of 32 on each of 8 devices is 256 samples a step; the 144 it trains on (160 less the
    validation carve) are refused before a run folder exists and before XLA compiles anything (its partitioner's
    warnings would be more lines)."""
    proc = run_cli(
        *("fit", "recipe=images", f"data.path={image_folder}", "data.image_size=16", "net=user_nets.PixelNet"),
        *("model.net.classes=4", "model.net.width=6", "accelerator=xla", "devices=8"),
        cwd=tmp_path,
        devices=8,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "xla_train: error: the train split has 144 samples, fewer than one global batch of 256; lower batch_size "
        "or use fewer devices\n"
    )
    assert not (tmp_path / "runs").exists()


PACKED_TEXTS = (  # a user's GRU net that packs its batch, on texts padded and cut at the back
    *("net=user_nets.PackedWordsNet", "model.net.vocab=100", "model.net.dim=10", "data.vocab_size=100"),
    *("data.maxlen=24", "data.padding=post", "data.truncating=post"),
)


@pytest.fixture(scope="module")
def texts_fit(text_csv, tmp_path_factory):
    """fit(runtime) -> (run folder, process, best checkpoint): PackedWordsNet trained on the text CSV from the command
    line on XLA, once per runtime for the module."""
    train, test = text_csv

    @functools.cache
    def fit(runtime: str):
        work = tmp_path_factory.mktemp(f"texts_{runtime}")
        proc = run_cli(
            *("fit", "recipe=texts", f"data.path={train}", f"data.test={test}", *PACKED_TEXTS),
            *("accelerator=xla", runtime_key(runtime), "epochs=2", "batch_size=16", "lr=0.01"),
            cwd=work,
        )
        run = work / "runs" / "texts" / "version_0"
        return run, proc, max((run / "checkpoints").glob("best-*.ckpt"))

    return fit


@pytest.fixture(scope="module")
def xla_texts(texts_fit):
    return texts_fit("torch_xla")


def epochs_compiled(stdout: str) -> list[str]:
    return [line.split(" - compile ")[-1] for line in stdout.splitlines() if " - compile " in line]


def block_of(ckpt: Path) -> dict:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["xla_train"]


# --- training -----------------------------------------------------------------------------------------------------


def test_a_users_net_trains_from_arrays_through_the_python_api_and_predicts_as_itself(tmp_path, text_csv):
    """Also, in the same process, a GRU net that packs its batch trains from a text CSV through xla_train.fit,
    padding="post", and learns."""
    env = cli_env(1, PYTHONPATH=path_with_tests())
    script = [sys.executable, str(SCRIPTS / "own_model_api_fit.py"), *map(str, text_csv)]
    proc = run_paced(script, 600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["diff"] < 1e-5 and out["param_device"] == "cpu" and out["gru"], out
    assert len(out["history"]) == 3 and out["history"][-1]["train_acc"] > 0.5, out["history"]
    assert out["test"]["test_acc"] > 0.7, out["test"]  # 0.85 as seeded; chance is 0.25
    # 40 test rows in 3 batches of 16: 8 padding rows, repeating row 0, which is class 0 and which the net gets right
    # (a padding row counted anywhere would count as right). The test accuracy is the net's own on the 40 rows.
    assert out["y0"] == 0 and out["right"][0], out
    assert out["test"]["test_acc"] == pytest.approx(sum(out["right"]) / 40, abs=1e-6), out
    assert epochs_compiled(proc.stdout)[1:3] == ["0.0 s (0 graphs)"] * 2, proc.stdout  # compiled once
    assert epochs_compiled(proc.stdout)[4:] == ["0.0 s (0 graphs)"], proc.stdout  # the GRU net's second epoch
    assert out["packed"]["padding"] == "post" and out["packed"]["test"]["test_acc"] > 0.75, out["packed"]
    block = block_of(Path(out["checkpoint"]))
    assert block["class_path"] == "user_nets.FlatNet" and block["init_args"] == {}  # a class that takes none
    assert block["kind"] == "array" and block["shape"] == [2, 4, 4] and block["dtype"] == "float32"
    config = (Path(out["checkpoint"]).parents[1] / "config.yaml").read_text()
    assert "net: null" in config and "path: null" in config  # given as objects: the saved config says so


def test_a_users_net_instance_trains_through_the_python_api_and_holds_the_best_weights(tmp_path, runtime):
    """fit(net=instance, x=, y=): the instance holds the best checkpoint's weights afterwards, on the CPU, and
    predicts as the checkpoint loaded into a new net does."""
    env = cli_env(1, PYTHONPATH=path_with_tests())
    out = script_json(SCRIPTS / "api_instance_fit.py", env=env, cwd=tmp_path, args=[runtime])
    assert out["diff"] < 1e-5 and out["device"] == "cpu", out
    assert out["test"]["test_acc"] > 0.5, out


def test_a_users_net_trains_from_an_image_folder_under_spmd_on_eight_devices(spmd_images):
    run, proc, ckpt = spmd_images
    assert "(accelerator xla, 8 device(s))" in proc.stdout
    assert epochs_compiled(proc.stdout)[1:] == ["0.0 s (0 graphs)"], proc.stdout
    # the evaluation program, first compiled where the module's epoch end reads its value, is validation's
    assert re.search(r"^compiled graphs by phase: train 1 \([\d.]+ s\), validate 1 \(", proc.stdout, re.M), proc.stdout
    assert "held-out test accuracy" in proc.stdout
    block = block_of(ckpt)
    assert block["format"] == 2 and block["class_path"] == "user_nets.PixelNet"
    assert block["init_args"] == {"classes": 4, "channels": 3, "width": 6}  # as given (width), defaults filled in
    assert block["labels"] == CLASSES and block["kind"] == "image" and block["image_size"] == 16
    assert "arch" not in block


def test_the_spmd_test_accuracy_is_the_nets_own_on_every_test_image(spmd_images, image_folder):
    """32 test images in one global batch of 64 over 8 devices: 32 padding rows, none of which may count. The
    final test's accuracy is the checkpoint's net run on the CPU over the test folder, image for image."""
    run, _, ckpt = spmd_images
    files = sorted((image_folder / "test").glob("*/*"))
    truth = np.array([CLASSES.index(f.parent.name) for f in files])
    right = (direct_probabilities(ckpt, files).argmax(1) == truth).sum()
    assert xla_train.Run.from_folder(run).test_metrics["test_acc"] == pytest.approx(right / len(files), abs=1e-6)


def test_a_users_packed_gru_trains_on_a_text_csv_padded_at_the_back(texts_fit, text_csv, runtime):
    """A GRU net written as PyTorch's tutorials write one (pack_padded_sequence, lengths counted from the padding,
    .cpu(), enforce_sorted=False; pad_packed_sequence) trains from the command line on either runtime as one
    program compiled in epoch 1, its GRU a scan, and learns. The checkpoint records the padding, and predict pads as
    training did: each test review becomes the ids the data module stored for it, padded at the back. The final test
    on XLA (40 reviews in 3 batches of 16: 8 padding rows, repeating review 0, class 0) scored what the checkpoint's
    net scores on the CPU, review for review."""
    from xla_train.data.texts import TextsDataModule
    from xla_train.serve.export import metadata
    from xla_train.serve.http import describe_input
    from xla_train.serve.predictor import load_for_inference

    from user_nets import PackedWordsNet

    run, proc, ckpt = texts_fit(runtime)
    assert f"runtime: {runtime}\n" in proc.stdout and "Traceback" not in proc.stderr, proc.stdout[-3000:]
    assert epochs_compiled(proc.stdout)[1:] == ["0.0 s (0 graphs)"], proc.stdout
    assert "gru runs as a scan" in proc.stdout, proc.stdout  # not traced step by step
    block = block_of(ckpt)
    assert block["class_path"] == "user_nets.PackedWordsNet" and block["init_args"] == {"vocab": 100, "dim": 10}
    assert block["labels"] == ["bad", "good"] and block["kind"] == "text" and block["maxlen"] == 24
    assert (block["padding"], block["truncating"]) == ("post", "post")
    predictor = load_for_inference(ckpt, net=PackedWordsNet)
    assert describe_input(predictor)["padding"] == "post"
    assert metadata(predictor, "pt2")["input"] == "int64 token ids (N, 24), padded at the back with 0"
    train, test = text_csv
    rows = list(csv.DictReader(open(test)))
    dm = TextsDataModule(path=str(train), test=str(test), maxlen=24, vocab_size=100, val_fraction=0)
    dm.adopt(block)
    stored = dm.arrays("test")[0]
    assert (stored[:, 0] != 0).all() and (stored[:, -1] == 0).any()  # the padding is at the back
    np.testing.assert_array_equal(predictor.preprocess([r["text"] for r in rows]).numpy(), stored)
    predicted = predictor.probabilities([r["text"] for r in rows]).argmax(1).numpy()
    truth = np.array([block["labels"].index(r["label"]) for r in rows])
    assert truth[0] == 0 and predicted[0] == 0
    right = (predicted == truth).sum()
    assert right / len(rows) > 0.75, right  # it learnt: chance is 0.5
    assert xla_train.Run.from_folder(run).test_metrics["test_acc"] == pytest.approx(right / len(rows), abs=1e-6)


def test_a_users_gru_net_predicts_on_the_cpu_after_torch_xla_is_imported(xla_texts, text_csv):
    """torch_xla's import puts its own GRU, which runs on XLA tensors only, in torch.nn.GRU's place; a user's net
    built after it (a notebook that trained on XLA, then predicts) must still predict on the CPU, as it does where
    torch_xla was never imported."""
    from xla_train.serve.predictor import load_for_inference

    from user_nets import PackedWordsNet

    _, _, ckpt = xla_texts
    texts = [r["text"] for r in csv.DictReader(open(text_csv[1]))][:6]
    after_xla = script_json(
        SCRIPTS / "gru_predict_after_xla.py",
        env=cli_env(1, PYTHONPATH=path_with_tests()),
        args=[ckpt, json.dumps(texts)],
    )
    expected = load_for_inference(ckpt, net=PackedWordsNet).probabilities(texts)
    assert np.allclose(np.array(after_xla), expected.numpy(), atol=1e-6), (after_xla, expected)


def test_a_copy_of_the_builtin_cnn_trains_exactly_as_the_builtin(tmp_path):
    """The same path for every net: a user's copy of CifarCNN gives the built-in recipe's epoch-1 loss."""
    losses = []
    for net in ([], ["net=user_nets.KerasCNN"]):
        work = tmp_path / str(len(losses))
        work.mkdir()
        run_cli(
            *("fit", "recipe=quickstart", *net, "accelerator=cpu", "precision=32", "compile=false", "epochs=1"),
            *("trainer.limit_train_batches=6", "trainer.limit_val_batches=2", "test_after_fit=false"),
            "predict_samples=0",
            cwd=work,
        )
        rows = list(csv.DictReader(open(work / "runs" / "quickstart" / "version_0" / "metrics.csv")))
        losses.append(float(next(r["train_loss"] for r in rows if r.get("train_loss"))))
    assert abs(losses[0] - losses[1]) < 1e-5, losses


# --- on the CPU, over HTTP, exported ------------------------------------------------------------------------------


def direct_probabilities(ckpt: Path, files: list[Path]) -> np.ndarray:
    """The net run by hand: the recorded class and arguments, the weights read from the file, each image decoded
    with PIL and normalised with the recorded statistics."""
    from user_nets import PixelNet

    loaded = torch.load(ckpt, map_location="cpu", weights_only=True)
    block = loaded["xla_train"]
    net = PixelNet(**block["init_args"])
    net.load_state_dict({k[4:]: v for k, v in loaded["state_dict"].items() if k.startswith("net.")})
    size = block["image_size"]
    pixels = np.stack([np.asarray(Image.open(f).convert("RGB").resize((size, size), Image.BILINEAR)) for f in files])
    x = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255.0
    mean, std = (torch.tensor(block[k]).view(1, -1, 1, 1) for k in ("mean", "std"))
    with torch.no_grad():
        return torch.softmax(net.eval()((x - mean) / std), 1).numpy()


def test_predict_on_the_cpu_equals_the_net_run_directly(spmd_images, image_folder, capsys):
    _, _, ckpt = spmd_images
    files = sorted((image_folder / "test" / "owl").iterdir())
    assert main(["predict", f"ckpt={ckpt}", f"inputs={image_folder / 'test' / 'owl'}", "net=user_nets.PixelNet"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.strip().splitlines()]
    assert [r[0] for r in rows] == [str(f) for f in files]
    direct = direct_probabilities(ckpt, files)
    assert [r[1] for r in rows] == [CLASSES[i] for i in direct.argmax(1)]
    np.testing.assert_allclose([float(r[2]) for r in rows], direct.max(1), atol=1e-4)


def test_the_server_and_the_onnx_export_answer_as_the_net(spmd_images, image_folder, tmp_path):
    from serving import Server, png, request

    _, _, ckpt = spmd_images
    files = sorted((image_folder / "test" / "fox").iterdir())[:3]
    direct = direct_probabilities(ckpt, files)
    env = cli_env(PYTHONPATH=path_with_tests())
    server = Server(ckpt, tmp_path, "net=user_nets.PixelNet", env=env)
    try:
        server.wait_ready()
        for f, expected in zip(files, direct):
            image = np.asarray(Image.open(f).convert("RGB"))
            status, body = request(server.port, "POST", "/predict", json.dumps({"image": png_b64(png(image))}))
            assert status == 200 and body["class"] == CLASSES[int(expected.argmax())], body
            np.testing.assert_allclose(body["probabilities"], expected, atol=1e-4)
    finally:
        assert server.stop() == 0

    ort = require("onnxruntime")
    out = tmp_path / "pixel.onnx"
    assert main(["export", f"ckpt={ckpt}", "format=onnx", f"out={out}", "net=user_nets.PixelNet"]) == 0
    session = ort.InferenceSession(str(out))
    pixels = np.stack([np.asarray(Image.open(f).convert("RGB").resize((16, 16), Image.BILINEAR)) for f in files])
    np.testing.assert_allclose(session.run(None, {"images": pixels})[0], direct, atol=1e-4)


def png_b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_text_predictions_from_the_csv_run_name_its_labels(xla_texts, tmp_path):
    _, _, ckpt = xla_texts
    good = "a wonderful superb moving brilliant delightful film " * 2
    proc = run_cli("predict", f"ckpt={ckpt}", f"text={good}", "net=user_nets.PackedWordsNet", cwd=tmp_path)
    name, label, p, probs = proc.stdout.strip().splitlines()[-1].split("\t")
    assert name == "text" and label == "good" and float(p) > 0.5 and probs.startswith("bad=")


def test_predict_feeds_a_text_net_the_ids_the_texts_module_trains_and_tests_on(text_csv, tmp_path):
    """Each CSV review, as predict and the server read it, becomes the very ids the texts data module stores for
    it, on the training split and on the test split; many reviews run past maxlen=16, so the cut is tested too."""
    from helpers import save_checkpoint
    from xla_train.data.texts import TextsDataModule
    from xla_train.preprocess import text
    from xla_train.serve.http import decode_item
    from xla_train.serve.predictor import load_for_inference

    from user_nets import WordsNet

    train, test = text_csv
    dm = TextsDataModule(path=str(train), test=str(test), maxlen=16, vocab_size=100, val_fraction=0)
    save_checkpoint(tmp_path / "w.ckpt", WordsNet(), {"vocab": 100, "dim": 12}, dm.inference_info())
    predictor = load_for_inference(tmp_path / "w.ckpt", net=WordsNet)
    for split, path in (("train", train), ("test", test)):
        reviews = [row["text"] for row in csv.DictReader(open(path))]  # val_fraction=0: the file's order
        stored, _ = dm.arrays(split)
        assert stored.shape == (len(reviews), 16), split
        assert (text.token_counts(stored) == 16).sum() >= len(reviews) // 4, split
        np.testing.assert_array_equal(predictor.preprocess(reviews).numpy(), stored, err_msg=split)
        served = np.concatenate([decode_item(predictor, {"text": r}).numpy() for r in reviews[:8]])
        np.testing.assert_array_equal(served, stored[:8], err_msg=split)


# --- the data modules: splits, labels, statistics ----------------------------------------------------------------


def test_a_test_split_carved_from_the_texts_is_stratified_and_the_vocabulary_never_sees_it(tmp_path):
    """A CSV without a test split: test_fraction of it is held out, stratified (7:2:1 classes stay 7:2:1), and the
    vocabulary is built from the rest. Each row has a word of its own, so a test row's own word is unknown (id 1) and
    a training or validation row's is not."""
    from xla_train.data.texts import TextsDataModule
    from xla_train.preprocess import text

    path = tmp_path / "all.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(100):  # 70 good, 20 bad, 10 meh
            writer.writerow([f"a film numbered{i} and more", "good" if i % 10 < 7 else "bad" if i % 10 < 9 else "meh"])
    dm = TextsDataModule(path=str(path), test_fraction=0.2, maxlen=8, vocab_size=1000, val_fraction=0.1)
    assert dm.labels == ["bad", "good", "meh"]  # sorted, not as first seen
    counts = {s: np.bincount(dm.arrays(s)[1], minlength=3).tolist() for s in ("train", "val", "test")}
    assert counts["test"] == [4, 14, 2] and sum(map(sum, counts.values())) == 100, counts  # bad, good, meh
    unknown = {s: (dm.arrays(s)[0] == text.UNK_ID).sum(axis=1) for s in ("train", "val", "test")}
    assert (unknown["test"] == 1).all() and (unknown["train"] == 0).all() and (unknown["val"] == 0).all(), unknown


def test_images_take_their_statistics_from_training_alone_and_their_labels_from_the_training_classes(
    image_folder, tmp_path
):
    """The channel statistics a checkpoint carries are the training images' (validation share included), never a
    held-out test share's; a test folder that lacks a class keeps every other class's label."""
    import shutil

    from xla_train.data.arrays import ArraysDataModule
    from xla_train.data.image_folder import ImageFolderDataModule
    from xla_train.data.image_base import channel_mean_std

    rng = np.random.default_rng(0)
    x = rng.integers(0, 40, (60, 8, 8, 3)).astype(np.uint8)
    x[::4] += 200  # bright images in every class and in every split
    y = np.arange(60) % 3
    arrays = ArraysDataModule(batch_size=8, test_fraction=0.3)
    arrays.hold(x, y)
    seen = np.concatenate([arrays.arrays("train")[0], arrays.arrays("val")[0]])
    assert len(seen) == 42 and len(arrays.arrays("test")[0]) == 18
    info = arrays.inference_info()
    assert [info["mean"], info["std"]] == list(channel_mean_std(seen))
    assert list(channel_mean_std(x)) != list(channel_mean_std(seen))  # the test share would move them

    root = tmp_path / "images"
    shutil.copytree(image_folder, root)
    shutil.rmtree(root / "test" / CLASSES[0])  # no test images of the first class
    folder = ImageFolderDataModule(path=str(root), image_size=16, val_fraction=0)
    assert folder.labels == CLASSES
    info = folder.inference_info()
    trained, tested = folder.arrays("train")[0], folder.arrays("test")[0]
    assert [info["mean"], info["std"]] == list(channel_mean_std(trained))
    assert list(channel_mean_std(np.concatenate([trained, tested]))) != list(channel_mean_std(trained))
    files = sorted((root / "test").glob("*/*"))
    _, labels = folder.arrays("test")
    assert labels.tolist() == [CLASSES.index(f.parent.name) for f in files]  # the reader's order: class, name
    assert set(labels.tolist()) == {1, 2, 3}


# --- never imported on a file's word ------------------------------------------------------------------------------


def test_a_checkpoint_of_a_users_net_is_refused_without_net_and_its_module_never_imported(spmd_images, tmp_path):
    run, _, ckpt = spmd_images
    log = tmp_path / "imported.txt"
    env = cli_env(1, PYTHONPATH=path_with_tests())
    env["USER_NETS_IMPORTED"] = str(log)
    args = [str(ckpt), str(run.parent.parent.parent), str(run / "config.yaml")]  # inputs: any folder
    proc = run_paced([sys.executable, str(SCRIPTS / "own_model_refusals.py"), *args], 300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[2, 2, 2, 2, 2] False", proc.stdout
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith(("xla_train: error:", "python:"))]
    assert len(errors) == 6, proc.stderr
    for line in errors:
        assert "holds a net of class user_nets.PixelNet" in line and "net=user_nets.PixelNet" in line, line
    assert not log.exists() and list(tmp_path.iterdir()) == []  # never imported, nothing written
    # Named, the same commands import it: the record works.
    assert main(["export", f"ckpt={ckpt}", "format=pt2", f"out={tmp_path / 'x.pt2'}", "net=user_nets.PixelNet"]) == 0


# --- bad input: one line, exit 2, nothing written, before the first step ------------------------------------------


def write_png_folder(root: Path, classes: dict[str, int]) -> Path:
    for name, n in classes.items():
        (root / "train" / name).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(root / "train" / name / f"{i}.png")
    return root


@pytest.mark.parametrize(
    "case,message",
    [
        ("net=user_nets.ThreeWay", "the net (ThreeWay) gives 3 logit(s) per sample but the data has 10 classes"),
        ("net=user_nets.Missing", "the net class 'user_nets.Missing' cannot be imported (AttributeError"),
        ("net=no_such_module.Net", "the net class 'no_such_module.Net' cannot be imported (ModuleNotFoundError"),
        ("net=user_nets.NotANet", "'user_nets.NotANet' is neither an nn.Module class nor a function that returns one"),
        ("net=user_nets.PixelNet model.net.channels=1", "the net (PixelNet) cannot take this data: on a CPU batch"),
        ("empty class", "class folder {root}/train/empty holds no images"),
        ("not an image", "{root}/train/a/notes.png is not a readable image (UnidentifiedImageError)"),
        ("csv columns", "{root}/t.csv has columns review, label; it needs a header with a text and a label column"),
        ("csv test label", "the test split has label(s) 'meh' that no training row has"),
        ("npz names", "{root}/a.npz holds x, y; it needs x_train and y_train"),
        ("texts vocabulary", "an embedding of the net needs"),
        ("packed on front padding", "packs its batch (pack_padded_sequence), which reads each text from its first"),
    ],
)
def test_bad_own_model_or_data_is_one_line_before_anything_runs(tmp_path, monkeypatch, capsys, case, message):
    root = tmp_path / "data"
    root.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    args = ["recipe=quickstart", "accelerator=cpu"]
    if case.startswith("net="):
        args += case.split()
    elif case in ("empty class", "not an image"):
        write_png_folder(root, {"a": 3, "b": 3})
        if case == "empty class":
            (root / "train" / "empty").mkdir()
        else:
            (root / "train" / "a" / "notes.png").write_text("not a picture")
        args = ["recipe=images", f"data.path={root}", "accelerator=cpu"]
    elif case.startswith("csv"):
        rows = "review,label\nfine,good\n" if case == "csv columns" else "text,label\nfine,good\nbad,bad\n"
        (root / "t.csv").write_text(rows)
        (root / "test.csv").write_text("text,label\nso so,meh\n")
        args = ["recipe=texts", f"data.path={root / 't.csv'}", f"data.test={root / 'test.csv'}", "accelerator=cpu"]
    elif case == "npz names":
        np.savez(root / "a.npz", x=np.zeros((4, 2)), y=np.zeros(4))
        args = ["recipe=arrays", f"data.path={root / 'a.npz'}", "accelerator=cpu"]
    elif case == "packed on front padding":  # data.padding=pre, the default, would feed it the padding
        (root / "t.csv").write_text("text,label\n" + "fine film,good\nbad film,bad\n" * 20)
        args = ["recipe=texts", f"data.path={root / 't.csv'}", "net=user_nets.PackedWordsNet", "accelerator=cpu"]
        args += ["model.net.vocab=100", "data.vocab_size=100", "data.maxlen=8"]
    elif case == "texts vocabulary":
        ids = np.random.default_rng(0).integers(0, 500, (40, 6))
        np.savez(root / "ids.npz", x_train=ids, y_train=np.arange(40) % 2)
        args = ["recipe=arrays", f"data.path={root / 'ids.npz'}", "net=user_nets.WordsNet", "accelerator=cpu"]
    monkeypatch.syspath_prepend(str(TESTS))
    assert main(args) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("xla_train: error: ") and message.format(root=root) in last, err
    assert "Traceback" not in err and list(work.iterdir()) == []


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"y": np.zeros(9)}, "y has 9 labels for 10 samples"),
        ({"y": np.full(10, -1)}, "the labels include a negative number"),
        ({"y": np.zeros(10)}, "the data has 1 class (0); a classifier needs samples of at least two classes"),
        ({"y": np.linspace(0, 1, 10)}, "y holds float64 values; labels are class numbers 0..C-1"),
        ({"x": np.zeros((10, 3), dtype=object)}, "x holds object values"),
        ({"validation_data": (np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4))}, "the val inputs are uint8 (8, 8, 3)"),
        ({"net": "not a net at all"}, "the net class 'not a net at all' cannot be imported"),
        ({"net": 3}, "net= takes an nn.Module, its class, a function that builds it, or an import path; not int"),
    ],
)
def test_bad_arrays_or_nets_in_python_raise_one_user_error(tmp_path, monkeypatch, kwargs, message):
    import xla_train
    from xla_train.errors import UserError

    from user_nets import FlatNet

    monkeypatch.chdir(tmp_path)
    given = {"net": FlatNet(), "x": np.zeros((10, 3), np.float32), "y": np.arange(10) % 2, **kwargs}
    with pytest.raises(UserError) as e:
        xla_train.fit(accelerator="cpu", **given)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_a_net_whose_shapes_depend_on_the_data_is_named_by_the_compile_guard(tmp_path):
    """A step that reads the host while traced cannot run as a program traced once (its program would keep the
    first batch's mask): auto runs Lightning's own step instead and says so, and the guard names the net; a K set
    by hand is one line and exit 2."""
    args = ("fit", "recipe=quickstart", "net=user_nets.BrightOnly", "epochs=2", "trainer.limit_train_batches=3")
    args += ("trainer.limit_val_batches=1", "predict_samples=0", "test_after_fit=false")
    for name in ("auto", "k2"):
        (tmp_path / name).mkdir()
    proc = run_cli(*args, "xla_guard=strict", cwd=tmp_path / "auto", check=False)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "steps per execution: 1 (auto: the training step read device values on the host while traced" in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("xla_train: error: XLA compiled") and "user_nets.BrightOnly" in last, last
    assert "the input shapes are unchanged" in last and "x[mask]" in last, last
    proc = run_cli(*args, "steps_per_execution=2", cwd=tmp_path / "k2", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("xla_train: error: steps_per_execution=2: the training step read device values") and (
        last.endswith("use steps_per_execution=1")
    ), last


def test_the_own_model_docs_name_every_data_form():
    doc = (TESTS.parent / "docs" / "own_model.md").read_text()
    for needle in ("recipe=arrays", "recipe=images", "recipe=texts", "net=", "xla_train.fit(net="):
        assert needle in doc, needle
