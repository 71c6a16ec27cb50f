"""Numbers that are not numbers: NaN or inf in the data is refused before the run, naming the split and the first
row; a training loss that stops being a number ends the fit in one line at the end of its group of steps, on the
CPU and on both XLA runtimes, with last.ckpt the last finite state and no such epoch the best."""

import math
import sys

import numpy as np
import pytest
import torch

import user_nets
import xla_train
from helpers import cli_env, path_with_tests, run_paced, runtime_key
from xla_train.checkpoint import safe_load
from xla_train.cli.main import main
from xla_train.errors import ConfigError, TrainingDiverged


def arrays(n: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64)


def spoiled(a: np.ndarray, rows: list[int], value: float) -> np.ndarray:
    a = a.astype(np.float32 if a.dtype.kind == "f" else np.float64, copy=True)
    for r in rows:
        a[r] = value
    return a


X, Y = arrays()
ADVICE = "drop or fill those rows: one makes every loss NaN"
IN_MEMORY = {
    "training inputs": (
        dict(x=spoiled(X, [17, 40], np.nan), y=Y),
        f"x (the training inputs) holds NaN in row 17 (2 rows in all); {ADVICE}",
    ),
    "training labels": (
        dict(x=X, y=spoiled(Y, [5], np.nan)),
        "y (the training labels) holds NaN in row 5; labels are class numbers 0..C-1",
    ),
    "validation inputs": (
        dict(x=X, y=Y, validation_data=(spoiled(X[:40], [3], np.inf), Y[:40])),
        f"val x (the validation inputs) holds inf in row 3; {ADVICE}",
    ),
    "test inputs": (
        dict(x=X, y=Y, test_data=(spoiled(X[:40], [0, 9], -np.inf), Y[:40])),
        f"test x (the test inputs) holds inf in row 0 (2 rows in all); {ADVICE}",
    ),
}


@pytest.mark.parametrize("case", IN_MEMORY)
def test_arrays_in_memory_with_nan_or_inf_are_refused_before_the_run(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kwargs, message = IN_MEMORY[case]
    with pytest.raises(ConfigError) as e:
        xla_train.fit(net=torch.nn.Linear(4, 2), accelerator="cpu", epochs=1, **kwargs)
    assert str(e.value) == message
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_npz_and_a_csv_with_missing_numbers_are_refused_in_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "d.npz", x_train=X, y_train=Y, x_test=spoiled(X[:40], [7], np.inf), y_test=Y[:40])
    (tmp_path / "t.csv").write_text("text,label\na fine film,good\nan awful film,nan\n")
    runs = [
        (
            ["recipe=arrays", f"data.path={tmp_path / 'd.npz'}", "net=user_nets.FlatNet"],
            f"test x (the test inputs) holds inf in row 7; {ADVICE}",
        ),
        (
            ["recipe=texts", f"data.path={tmp_path / 't.csv'}"],
            f"{tmp_path / 't.csv'}:3 has label 'nan', a missing number",
        ),
    ]
    for argv, message in runs:
        assert main(["fit", "accelerator=cpu", *argv]) == 2
        out, err = capfd.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith(f"xla_train: error: {message}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "t.csv"]


def test_a_diverging_loss_stops_the_fit_and_keeps_the_last_finite_checkpoint(tmp_path, monkeypatch):
    """9 steps an epoch; NaN from step 13 (epoch 2, its step 4). last.ckpt, written every 5 steps, stays step 10's;
    the check before step 15's write stops the fit. Epoch 1 is the best, and the only epoch in the history."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    net = user_nets.GoesNaN(after=12)
    with pytest.raises(TrainingDiverged) as e:
        xla_train.fit(net=net, x=X, y=Y, accelerator="cpu", epochs=4, batch_size=16, checkpoint_every=5)
    folder = tmp_path / "runs" / "arrays" / "version_0" / "checkpoints"
    assert str(e.value) == (
        f"the training loss was not a number at epoch 2, step 4 of the epoch; the fit stopped after step 15 and "
        f"{folder.relative_to(tmp_path) / 'last.ckpt'} holds the last finite state; try a lower learning rate than "
        f"lr=0.001 (e.g. lr=0.0001), or look for inputs or labels out of range"
    )
    last = safe_load(folder / "last.ckpt")
    assert last["global_step"] == 10 and last["state_dict"]["net.calls"] == 10
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())
    assert sorted(p.name for p in folder.iterdir()) == ["best-epoch=1.ckpt", "last.ckpt"]
    metrics = (folder.parent / "metrics.csv").read_text()
    assert "nan" not in metrics.lower()


@pytest.mark.parametrize("devices", [1, 8])
def test_on_xla_the_fit_stops_at_the_end_of_the_group_of_steps(runtime, devices, tmp_path):
    """steps_per_execution=4: NaN from step 7, seen when the group of steps 5-8 ends (one read per group), on one
    device and on eight (a global batch of 64: more rows, so that an epoch still has more than 8 steps)."""
    x, y = arrays(200 if devices == 1 else 900)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y)
    command = [sys.executable, "-m", "xla_train", "recipe=arrays", "data.path=d.npz", "net=user_nets.GoesNaN"]
    command += ["model.net.after=6", "accelerator=xla", "steps_per_execution=4", "batch_size=16", "epochs=2"]
    command += [f"devices={devices}", runtime_key(runtime)] + (["batch_size=8"] if devices == 8 else [])
    env = cli_env(devices, PYTHONPATH=path_with_tests())
    proc = run_paced(command, 300, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "xla_train: error: the training loss was not a number at epoch 1, step 7 of the epoch; the fit stopped after "
        "step 8 and no checkpoint was written before it; try a lower learning rate than lr=0.001 (e.g. lr=0.0001), "
        "or look for inputs or labels out of range"
    )
    assert not list(tmp_path.rglob("*.ckpt"))


def test_add_step_counts_the_steps_before_the_first_non_finite_loss():
    from xla_train.training.module import SUMS, add_step

    sums = torch.zeros(SUMS)
    for loss in (1.0, 2.0, math.nan, 3.0, math.inf):
        sums = add_step(sums, torch.tensor([loss, 1.0, 4.0]))
    assert math.isnan(sums[0]) and sums[1:].tolist() == [5.0, 20.0, 2.0]
