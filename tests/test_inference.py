"""CPU inference from a checkpoint: batch-size independence, the predict command, and its bad inputs."""

import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import CLASSES
from xla_train.checkpoint import atomic_save, safe_load
from xla_train.cli.main import main
from xla_train.errors import CheckpointError
from xla_train.serve.predictor import load_for_inference


@pytest.fixture(scope="module")
def ckpt(cpu_run):
    return cpu_run / "checkpoints" / "last.ckpt"


def test_predictions_do_not_depend_on_the_batch_size(ckpt):
    p = load_for_inference(ckpt)
    assert not p.model.training and p.labels == CLASSES
    images = np.random.default_rng(0).integers(0, 256, (1000, 32, 32, 3), dtype=np.uint8)
    reference = p.probabilities(images, batch_size=1000)
    assert reference.shape == (1000, 10)
    torch.testing.assert_close(reference.sum(1), torch.ones(1000))
    for bs in (7, 64):
        torch.testing.assert_close(p.probabilities(images, batch_size=bs), reference, atol=1e-5, rtol=0)
    # batch 1 on a tenth of them: a thousand single forwards cost more than they prove
    torch.testing.assert_close(p.probabilities(images[:100], batch_size=1), reference[:100], atol=1e-5, rtol=0)


def write_inputs(tmp_path):
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(rng.integers(0, 256, (300, 200, 3), dtype=np.uint8)).save(tmp_path / "big.jpg")
    folder = tmp_path / "folder"
    folder.mkdir()
    Image.fromarray(rng.integers(0, 256, (40, 40), dtype=np.uint8)).save(folder / "gray.png")
    np.save(tmp_path / "batch.npy", rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8))
    return [tmp_path / "a.png", tmp_path / "big.jpg", folder, tmp_path / "batch.npy"]


def test_predict_command_prints_one_line_per_input_without_lightning_or_xla(ckpt, tmp_path):
    inputs = ",".join(str(p) for p in write_inputs(tmp_path))
    code = (
        "import sys; from xla_train.cli.main import main; rc = main(sys.argv[1:]);"
        "assert 'torch_xla' not in sys.modules and 'lightning' not in sys.modules; sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "predict", f"ckpt={ckpt}", f"inputs={inputs}", "--probs"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 + 1 + 1 + 4
    for line in lines:
        name, label, prob, probs = line.split("\t")
        assert label in CLASSES and 0 < float(prob) <= 1
        values = [float(kv.split("=")[1]) for kv in probs.split()]
        assert len(values) == 10 and abs(sum(values) - 1) < 1e-3 and max(values) == pytest.approx(float(prob), abs=1e-4)
    assert lines[-1].startswith(f"{tmp_path / 'batch.npy'}[3]\t")


def test_predict_command_matches_the_api(ckpt, tmp_path, capsys):
    images = np.random.default_rng(2).integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    np.save(tmp_path / "x.npy", images)
    assert main(["predict", f"ckpt={ckpt}", f"inputs={tmp_path / 'x.npy'}", "batch_size=2"]) == 0
    printed = [line.split("\t")[1] for line in capsys.readouterr().out.strip().splitlines()]
    assert printed == [label for label, _ in load_for_inference(ckpt).predict(images)]


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _bad_files(tmp_path, ckpt):
    good = ckpt.read_bytes()
    (tmp_path / "truncated.ckpt").write_bytes(good[: len(good) // 2])
    (tmp_path / "empty.ckpt").write_bytes(b"")
    (tmp_path / "text.ckpt").write_text("hello")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.ckpt")
    torch.save({"state_dict": {"w": torch.zeros(1)}}, tmp_path / "lightning_only.ckpt")
    other = torch.load(ckpt, weights_only=True)
    other["xla_train"]["config"]["num_classes"] = 3
    atomic_save(other, tmp_path / "other_model.ckpt")
    torch.save({"state_dict": {}, "payload": _RunsCode(tmp_path / "pwned")}, tmp_path / "evil.ckpt")
    with open(tmp_path / "evil_raw.ckpt", "wb") as f:  # a bare pickle, not torch's zip format
        pickle.dump({"state_dict": {}, "payload": _RunsCode(tmp_path / "pwned")}, f)


@pytest.mark.parametrize(
    "name,message",
    [
        ("missing.ckpt", "does not exist"),
        ("empty.ckpt", "is empty"),
        ("truncated.ckpt", "is not a readable checkpoint"),
        ("text.ckpt", "is not a readable checkpoint"),
        ("foreign.ckpt", "not an xla_train checkpoint"),
        ("lightning_only.ckpt", "not from xla_train"),
        ("other_model.ckpt", "do not fit the cnn net"),
        ("evil.ckpt", "is unsafe: it holds objects that a weights-only load refuses (Unsupported global: io.open)"),
        ("evil_raw.ckpt", "is unsafe: it holds objects that a weights-only load refuses (Unsupported global: io.open)"),
    ],
)
def test_bad_checkpoints_are_refused_in_one_line(ckpt, tmp_path, capsys, name, message):
    _bad_files(tmp_path, ckpt)
    np.save(tmp_path / "x.npy", np.zeros((1, 32, 32, 3), np.uint8))
    assert main(["predict", f"ckpt={tmp_path / name}", f"inputs={tmp_path / 'x.npy'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and name in err[0], err
    assert not (tmp_path / "pwned").exists()


def test_safe_load_never_runs_code_from_the_file(tmp_path, ckpt):
    _bad_files(tmp_path, ckpt)
    for name in ("evil.ckpt", "evil_raw.ckpt"):
        with pytest.raises(CheckpointError):
            safe_load(tmp_path / name)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: np.save(d / "x.npy", np.zeros((2, 32, 32, 5), np.uint8)), "has shape (2, 32, 32, 5)"),
        (lambda d: np.save(d / "x.npy", np.zeros((32,), np.uint8)), "has shape (32,)"),
        (lambda d: np.save(d / "x.npy", np.full((1, 8, 8, 3), 7.0)), "values outside 0..1"),
        (lambda d: (d / "x.npy").write_text("no"), "is not a readable .npy"),
        (lambda d: (d / "x.png").write_text("no"), "is not a readable image"),
        (lambda d: (d / "x").mkdir(), "holds no images"),
        (lambda d: None, "does not exist"),
    ],
)
def test_bad_inputs_are_refused_in_one_line(ckpt, tmp_path, capsys, make, message):
    make(tmp_path)
    target = next((p for p in tmp_path.iterdir()), tmp_path / "x.png")
    assert main(["predict", f"ckpt={ckpt}", f"inputs={target}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_float_arrays_in_unit_range_are_accepted(ckpt, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((2, 3, 16, 16)).astype(np.float32))
    assert main(["predict", f"ckpt={ckpt}", f"inputs={tmp_path / 'x.npy'}"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
