"""Run folders: claimed exclusively, so concurrent fits never share one; logger=tensorboard really writes."""

import multiprocessing as mp
import sys
from pathlib import Path

import pytest

from helpers import SCRIPTS, cli_env, require, run_cli, run_paced
from xla_train.config import run_loggers
from xla_train.config.run_loggers import RunCSVLogger  # imported before the fork: the children start at once

WORKERS, EACH = 6, 4


def _claim_with_logger(root: str, barrier, out) -> None:
    barrier.wait()  # start together, so that each lists the folder before the others create theirs
    for _ in range(EACH):
        out.put(RunCSVLogger(root, name="cifar10").log_dir)


def test_concurrent_runs_of_one_recipe_never_share_a_version_folder(tmp_path):
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_claim_with_logger, args=(str(tmp_path), barrier, out)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    dirs = [out.get(timeout=60) for _ in range(WORKERS * EACH)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(set(dirs)) == WORKERS * EACH
    made = sorted(p.name for p in (tmp_path / "cifar10").iterdir())
    assert made == sorted(f"version_{i}" for i in range(WORKERS * EACH))


def test_claim_folder_skips_a_number_taken_since_it_listed(tmp_path, monkeypatch):
    """The retry itself: another process creates version_2 between our listing and our mkdir."""
    (tmp_path / "version_0").mkdir()
    (tmp_path / "version_1").mkdir()
    real_mkdir = Path.mkdir

    def racing_mkdir(self, *args, **kwargs):
        if self.name == "version_2" and not self.exists():
            real_mkdir(self)  # the other process wins
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", racing_mkdir)
    assert run_loggers.claim_folder(tmp_path).name == "version_3"


def test_a_refused_command_claims_no_folder(tmp_path):
    """The claim waits for the checks: a missing data set leaves no version_N behind."""
    proc = run_cli(
        "fit",
        "recipe=quickstart",
        "accelerator=cpu",
        "epochs=1",
        "batch_size=12",
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_tensorboard_missing_is_one_line_that_says_how_to_install_it(tmp_path):
    command = [sys.executable, str(SCRIPTS / "block_tensorboard.py"), "fit", "recipe=quickstart", "epochs=1"]
    proc = run_paced([*command, "accelerator=cpu", "logger=tensorboard"], 300, cwd=tmp_path, env=cli_env())
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "xla_train: error: logger=tensorboard needs the tensorboard package: pip install 'xla_train[tensorboard]' "
        "(or pip install tensorboard), or use logger=csv"
    )
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_logger_tensorboard_writes_event_files_with_the_metrics(tmp_path):
    require("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_cli(
        "fit",
        "recipe=quickstart",
        "epochs=1",
        "accelerator=cpu",
        "logger=tensorboard",
        "trainer.limit_train_batches=3",
        "test_after_fit=false",
        "predict_samples=0",
        cwd=tmp_path,
    )
    folder = tmp_path / "runs" / "quickstart" / "version_0"
    assert list(folder.glob("events.out.tfevents.*")) and (folder / "checkpoints" / "last.ckpt").is_file()
    events = EventAccumulator(str(folder))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"train_loss", "val_acc"} <= set(scalars), scalars
    assert 0.0 <= events.Scalars("val_acc")[-1].value <= 1.0


def test_evaluations_go_beside_the_run_or_under_runs_dir(tmp_path, monkeypatch):
    run = tmp_path / "shared" / "cifar10" / "version_3"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("recipe_name: cifar10\n")
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(b"")
    mine = tmp_path / "runs"
    assert run_loggers.eval_parent(str(mine), "cifar10", str(ckpt)) == run.resolve()
    stray = tmp_path / "model.ckpt"
    assert run_loggers.eval_parent(str(mine), "cifar10", str(stray)) == mine / "cifar10"
    assert run_loggers.eval_parent(str(mine), "cifar10", None) == mine / "cifar10"
    # a run this user cannot write (emulated: tests may run as root, which may write anywhere)
    real_access = run_loggers.os.access
    monkeypatch.setattr(
        run_loggers.os, "access", lambda p, mode: False if Path(p) == run.resolve() else real_access(p, mode)
    )
    assert run_loggers.eval_parent(str(mine), "cifar10", str(ckpt)) == mine / "cifar10"


def test_a_runs_dir_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(run_loggers.ConfigError, match=f"cannot create a run folder in {tmp_path / 'x'}: permission"):
        run_loggers.claim_folder(tmp_path / "x")


def test_a_worker_writes_the_config_the_parent_rendered_atomically_and_never_over_a_run(tmp_path):
    """strategy=xla_mp pickles the config writer into each worker: it carries the YAML, not the parser."""
    import pickle

    from xla_train.config.save_config import RenderedConfig

    path = tmp_path / "config.yaml"
    pickle.loads(pickle.dumps(RenderedConfig("seed_everything: 1\n"))).save(None, str(path))
    assert path.read_text() == "seed_everything: 1\n" and [p.name for p in tmp_path.iterdir()] == ["config.yaml"]
    with pytest.raises(FileExistsError):
        RenderedConfig("seed_everything: 2\n").save(None, str(path))
    assert path.read_text() == "seed_everything: 1\n"
    RenderedConfig("seed_everything: 2\n").save(None, str(path), overwrite=True)
    assert path.read_text() == "seed_everything: 2\n" and len(list(tmp_path.iterdir())) == 1


def test_a_run_folder_finds_its_files_and_is_found_from_a_checkpoint(tmp_path):
    """RunFolder is the one place that knows a run's layout: every command finds config, checkpoints and metrics
    through it (training/run_folder.py)."""
    import os
    import time

    from xla_train.training.run_folder import RunFolder

    runs = tmp_path / "runs" / "cifar10"
    first, second = RunFolder.claim(runs), RunFolder.claim(runs)
    assert (first.path.name, second.path.name) == ("version_0", "version_1")
    assert not first.is_run() and first.checkpoint() is None
    for run in (first, second):
        run.config.write_text("recipe_name: cifar10\n")
        run.checkpoints.mkdir()
        run.last.write_bytes(b"x")
    assert first.checkpoint() == first.last  # no best yet: the newest state
    (first.checkpoints / "best-epoch=1.ckpt").write_bytes(b"x")
    time.sleep(0.01)
    (first.checkpoints / "best-epoch=3.ckpt").write_bytes(b"x")
    assert first.best().name == "best-epoch=3.ckpt" == first.checkpoint().name
    assert RunFolder.of_checkpoint(first.checkpoints / "best-epoch=3.ckpt").path == first.path.resolve()
    loose = second.path / "copied.ckpt"  # a checkpoint beside the config, not in checkpoints/
    loose.write_bytes(b"x")
    assert RunFolder.of_checkpoint(loose).path == second.path.resolve()
    assert RunFolder.of_checkpoint(tmp_path / "elsewhere.ckpt") is None
    os.utime(first.last, (time.time() + 60, time.time() + 60))  # the newest last.ckpt is the first run's
    assert RunFolder.latest_with_last(tmp_path / "runs", "cifar10").path == first.path
    second.metrics.write_text("epoch\n")
    assert [r.path for r in RunFolder.under(tmp_path / "runs")] == [second.path]
