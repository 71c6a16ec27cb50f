"""strategy=xla_mp trains in worker processes (a TPU's cores); what the parent reports must come back from them.

Emulated on XLA:CPU by tests/mp_host.py: one device, trained in one forked worker
through Lightning's XLA launcher and torch_xla's multi-process spawn, as on a TPU
(one process needs no collective). The parent then prints the held-out line, and
fit()/evaluate() answer, only from what the launcher returned.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import SCRIPTS, TESTS, cli_env, path_with_tests

SETTINGS = {
    "strategy": "xla_mp",
    "model.net.class_path": "probes.TinyNet",
    "predict_samples": 0,
    "epochs": 1,
    "trainer.limit_train_batches": 2,
    "trainer.limit_val_batches": 1,
    "trainer.limit_test_batches": 1,
    "trainer.num_sanity_val_steps": 0,
}

API = f"""
import json, os
import mp_host  # noqa: F401  (the emulated TPU host)
import xla_train
settings = {SETTINGS!r}
run = xla_train.fit("quickstart", test_after_fit=True, **settings)
val = xla_train.evaluate(run, split="val", **{{k: v for k, v in settings.items() if k != "epochs"}})
print(json.dumps({{"folder": str(run.folder), "last": run.last_checkpoint, "best": run.best_checkpoint,
                  "epochs": len(run.history), "test": run.test_metrics, "val": val, "pid": os.getpid()}}))
"""


@pytest.mark.slow  # two fits and a validate in forked workers: about a minute here
def test_xla_mp_returns_the_workers_metrics_run_folder_and_checkpoints_to_the_parent(tmp_path):
    env = cli_env(1, PYTHONPATH=path_with_tests())
    args = [f"--{k}={v}" if k.startswith("trainer.") else f"{k}={v}" for k, v in SETTINGS.items()]
    command = [sys.executable, str(TESTS / "mp_host.py"), "recipe=quickstart", *args]
    cli = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-4000:]
    run = tmp_path / "runs" / "quickstart" / "version_0"
    assert "held-out test accuracy: " in cli.stdout, cli.stdout  # the parent's line, from the worker's metrics
    assert f"(best checkpoint {run.relative_to(tmp_path)}/checkpoints/best-epoch=1.ckpt)" in cli.stdout
    assert sorted(p.name for p in (tmp_path / "runs" / "quickstart").iterdir()) == ["version_0"]

    api = subprocess.run(
        [sys.executable, "-c", API], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert api.returncode == 0, api.stderr[-4000:]
    out = json.loads(api.stdout.strip().splitlines()[-1])
    folder = tmp_path / "runs" / "quickstart" / "version_1"
    assert out["folder"] == str(folder)  # the worker's run folder, not the next free one
    assert out["last"] == str(folder / "checkpoints" / "last.ckpt")
    assert out["best"] == str(folder / "checkpoints" / "best-epoch=1.ckpt")
    assert out["epochs"] == 1 and set(out["test"]) >= {"test_acc", "test_loss"}, out
    assert set(out["val"]) == {"val_acc", "val_loss"} and 0 <= out["val"]["val_acc"] <= 1, out


def test_an_xla_mp_trainer_pickles_for_its_workers():
    """Fast: every callback, the config writer and the data module survive the pickling to a worker."""
    env = cli_env(1, PYTHONPATH=path_with_tests())
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "xla_mp_pickle.py")], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PicklableSaveConfig" in proc.stdout and "KerasProgress" in proc.stdout, proc.stdout
