"""`predict ckpt=... split=...`: every sample once, in order, equal to CPU predict, on 1 and 8 XLA devices without
recompiling; bad input in one line; and text checkpoints that keep their own tokenizer (validate, test, resume,
predict) whatever vocabulary the data folder would give."""

import csv
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from helpers import run_cli, runtime_key
from test_imdb import write_aclimdb
from xla_train import api
from xla_train.cli.main import main
from xla_train.checkpoint import safe_load
from xla_train.config.saved_run import split_data
from xla_train.data.cifar10 import CIFAR10DataModule
from xla_train.serve.predictor import load_for_inference


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def cpu_reference(ckpt, cifar_root):
    """load_for_inference's probabilities for the fixture's test split, and its labels."""
    images, labels = CIFAR10DataModule(data_dir=str(cifar_root), download=False).arrays("test")
    return load_for_inference(ckpt).probabilities(images).numpy(), np.asarray(labels)


@pytest.fixture
def run_copy(cpu_run, tmp_path):
    """The session's CNN run folder, copied so that predictions written beside it stay in this test."""
    return Path(shutil.copytree(cpu_run, tmp_path / "runs" / "cifar10" / "version_0"))


@pytest.mark.parametrize("devices, batch_size", [(1, 24), (8, 8)])  # 80 test samples: 24 and 64 do not divide it
def test_split_predict_on_xla_devices_keeps_every_sample_in_order(
    cpu_run, cifar_root, relaxed_cifar_checks, tmp_path, devices, batch_size, runtime
):
    ckpt = cpu_run / "checkpoints" / "last.ckpt"
    out = tmp_path / "preds.csv"
    proc = run_cli(
        "predict",
        f"ckpt={ckpt}",
        "split=test",
        "accelerator=xla",
        runtime_key(runtime),
        f"batch_size={batch_size}",
        f"out={out}",
        "--probs",
        cwd=tmp_path,
        devices=devices,
    )
    reference, labels = cpu_reference(ckpt, cifar_root)
    names = load_for_inference(ckpt).labels
    rows = read_csv(out)
    assert len(rows) == len(labels) == 80
    assert [int(r["index"]) for r in rows] == list(range(80))
    assert [r["label"] for r in rows] == [names[i] for i in labels]
    probs = np.array([[float(r[f"p_{n}"]) for n in names] for r in rows])
    np.testing.assert_allclose(probs, reference, atol=1e-4)
    assert [r["predicted"] for r in rows] == [names[i] for i in reference.argmax(1)]
    np.testing.assert_allclose([float(r["probability"]) for r in rows], reference.max(1), atol=1e-4)
    global_batch = batch_size * devices
    where = {"torch_xla": "XLA:CPU", "jax": "JAX CPU"}[runtime] + (f" x{devices}" if devices > 1 else "")
    # the runtime's device, not its strategy's torch device
    assert f"80 samples of the test split on {where} in" in proc.stdout, proc.stdout
    assert f"batch(es) of {global_batch}" in proc.stdout
    first, after = map(
        int, re.search(r"XLA graphs compiled: (\d+) for the first batch, (\d+) after it", proc.stdout).groups()
    )
    assert first >= 1 and after == 0, proc.stdout
    acc = float(re.search(r"accuracy ([\d.]+)", proc.stdout).group(1))
    assert acc == pytest.approx((reference.argmax(1) == labels).mean(), abs=1e-4)


def test_split_predict_writes_beside_the_run_and_never_overwrites(run_copy, cifar_root, relaxed_cifar_checks, capsys):
    ckpt = run_copy / "checkpoints" / "last.ckpt"
    assert main(["predict", f"ckpt={ckpt}", "split=val", "accelerator=cpu", "batch_size=48"]) == 0
    assert main(["predict", f"ckpt={ckpt}", "split=val", "accelerator=cpu"]) == 0
    first, second = run_copy / "predictions-val-last.csv", run_copy / "predictions-val-last-2.csv"
    assert f"predictions: {first}" in capsys.readouterr().out
    assert first.read_text() == second.read_text()  # the batch size changes nothing
    rows = read_csv(first)
    names = load_for_inference(ckpt).labels
    _, _, labels = split_data(ckpt, "val")  # the run's own split: validation carved from the 200 training images
    assert list(rows[0]) == ["index", "label", "predicted", "probability"] and len(rows) == len(labels)
    assert [r["label"] for r in rows] == [names[i] for i in labels]
    assert not list(run_copy.glob(".*staging*"))
    with warnings.catch_warnings(record=True) as caught:  # none a user cannot act on (torch 2.12's LeafSpec)
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # hidden from users by Python's defaults
        path = api.predict_split(str(ckpt), split="train", accelerator="cpu", probs=True)
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    assert path == run_copy / "predictions-train-last.csv" and len(read_csv(path)) + len(rows) == 200


@pytest.mark.parametrize(
    "case, message",
    [
        ("split", "split='bogus' is not a split; use split=test, split=val or split=train"),
        ("no_config", "has no saved run config"),
        ("no_data", "CIFAR-10 at"),
        ("out_exists", "already exists; predict never overwrites a file"),
        ("both", "give either inputs= or split=, not both"),
        ("devices", "devices: expected PositiveInt or 'auto', got 'abc'"),  # as fit's steps_per_execution
        ("batch", "batch_size=12 is not a positive multiple of 8"),
    ],
)
def test_bad_split_predict_is_one_line_and_writes_nothing(run_copy, tmp_path, capsys, case, message):
    ckpt = run_copy / "checkpoints" / "last.ckpt"
    args = ["predict", f"ckpt={ckpt}", "split=test", "accelerator=cpu"]
    if case == "split":
        args[2] = "split=bogus"
    elif case == "no_config":
        lone = tmp_path / "lone" / "model.ckpt"
        lone.parent.mkdir()
        shutil.copy(ckpt, lone)
        args[1] = f"ckpt={lone}"
    elif case == "no_data":
        args.append(f"data_dir={tmp_path / 'nowhere'}")
    elif case == "out_exists":
        (tmp_path / "taken.csv").write_text("precious\n")
        args.append(f"out={tmp_path / 'taken.csv'}")
    elif case == "both":
        args.append("inputs=x.png")
    elif case == "devices":
        args.append("devices=abc")
    elif case == "batch":
        args.append("batch_size=12")
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("xla_train: error: ") and err.count("\n") == 1 and message in err, err
    assert sorted(p for p in tmp_path.rglob("*")) == before
    if case == "out_exists":
        assert (tmp_path / "taken.csv").read_text() == "precious\n"


# --- text checkpoints keep their own tokenizer -----------------------------------------------------------------

FIT = [
    "fit",
    "recipe=imdb",
    "maxlen=64",
    "model.net.embed_dim=16",
    "model.net.hidden_size=16",
    "lr=0.01",
    "download=false",
    "accelerator=cpu",
    "batch_size=64",
    "test_after_fit=false",
]


def other_vocabulary(src: Path, dst: Path) -> Path:
    """The same reviews, except that every training review gains 20 new words, often: rebuilt from this folder,
    the vocabulary would give every old word another id. The test reviews are unchanged."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".xla_train_cache"))
    extra = " ".join(f"novelword{k}" for k in range(20) for _ in range(5))
    for f in (dst / "aclImdb" / "train").glob("*/*.txt"):
        f.write_bytes(f.read_bytes() + b" " + extra.encode())
    return dst


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("text_run")
    root = write_aclimdb(work / "data", per_class=72)
    run_cli(*FIT, "epochs=1", f"data_dir={root}", cwd=work)
    return work, root, work / "runs" / "imdb" / "version_0" / "checkpoints" / "last.ckpt"


def test_text_checkpoint_keeps_its_tokenizer_whatever_the_data_folder(text_run, tmp_path, monkeypatch):
    work, root, ckpt = text_run
    other = other_vocabulary(root, tmp_path / "other")
    monkeypatch.chdir(tmp_path)
    from xla_train.data.imdb import load_imdb

    rebuilt = load_imdb(str(other), False, 64, 10000)["test"][0]
    assert not np.array_equal(rebuilt, load_imdb(str(root), False, 64, 10000)["test"][0])  # ids would change
    same = api.evaluate(str(ckpt), split="test", accelerator="cpu", data_dir=str(root))
    changed = api.evaluate(str(ckpt), split="test", accelerator="cpu", data_dir=str(other))
    assert same and changed == same
    path = api.predict_split(
        str(ckpt), split="test", out=tmp_path / "p.csv", accelerator="cpu", data_dir=str(other), probs=True
    )
    texts = [
        f.read_text() for label in ("neg", "pos") for f in sorted((root / "aclImdb" / "test" / label).glob("*.txt"))
    ]
    reference = load_for_inference(ckpt).probabilities(texts).numpy()
    rows = read_csv(path)
    np.testing.assert_allclose([[float(r["p_neg"]), float(r["p_pos"])] for r in rows], reference, atol=1e-4)


def test_resume_keeps_the_checkpoint_tokenizer(text_run, tmp_path):
    work, root, ckpt = text_run
    other = other_vocabulary(root, tmp_path / "other")
    run_cli(*FIT, "epochs=2", f"ckpt={ckpt}", f"data_dir={other}", cwd=tmp_path)
    resumed = tmp_path / "runs" / "imdb" / "version_0" / "checkpoints" / "last.ckpt"
    assert safe_load(resumed)["xla_train"]["tokenizer"] == safe_load(ckpt)["xla_train"]["tokenizer"]
    assert safe_load(resumed)["epoch"] == 1


def test_text_split_predict_on_two_xla_devices_uses_the_checkpoint_tokenizer(text_run, tmp_path):
    """The LSTM as XLA's scan under SPMD, 144 reviews in global batches of 32, from a folder whose vocabulary
    differs: CPU predict's probabilities, in order, and nothing compiled after the first batch."""
    work, root, ckpt = text_run
    other = other_vocabulary(root, tmp_path / "other")
    out = tmp_path / "text.csv"
    proc = run_cli(
        "predict",
        f"ckpt={ckpt}",
        "split=test",
        "accelerator=xla",
        "batch_size=16",
        f"data_dir={other}",
        f"out={out}",
        "--probs",
        cwd=tmp_path,
        devices=2,
    )
    texts = [
        f.read_text() for label in ("neg", "pos") for f in sorted((root / "aclImdb" / "test" / label).glob("*.txt"))
    ]
    reference = load_for_inference(ckpt).probabilities(texts).numpy()
    rows = read_csv(out)
    assert [int(r["index"]) for r in rows] == list(range(len(texts)))
    np.testing.assert_allclose([[float(r["p_neg"]), float(r["p_pos"])] for r in rows], reference, atol=1e-4)
    assert re.search(r"XLA graphs compiled: [1-9]\d* for the first batch, 0 after it", proc.stdout), proc.stdout
