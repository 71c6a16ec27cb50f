"""A refused command prints exactly one line on stderr, and nothing on stdout: Lightning's start-up lines ("Seed set
to 0", "GPU available") come only once the run starts, and the warnings xla_train's own defaults would raise (a net
instance that jsonargparse cannot serialise, a short epoch under log_every_n_steps, the model summary on bf16) are
settled, not printed."""

import logging
import subprocess
import sys
import warnings

import lightning.pytorch  # noqa: F401  its log handlers keep the sys.stderr of their import: not a capfd stream
import numpy as np
import pytest
import torch

import xla_train
from helpers import new_user_env, runtime_key
from xla_train.cli.main import main
from xla_train.errors import UserError


@pytest.fixture
def missing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path / "no_such_folder"


CASES = {
    "an XLA runtime named with the eager accelerator": (
        ["recipe=quickstart", "runtime=jax", "accelerator=cpu"],
        "runtime=jax runs XLA, and accelerator=cpu is eager PyTorch without it; use accelerator=xla (XLA on this "
        "CPU) or auto, or leave runtime=auto",
    ),
    "refused as the settings are read": (
        ["recipe=quickstart", "batch_size=0"],
        "batch_size=0 is not a positive multiple of 8; XLA tiles tensors in multiples of 8, so use e.g. 8",
    ),
    "refused after the Trainer is built": (
        ["recipe=images", "data.path={missing}", "accelerator=cpu"],
        "data.path={missing} is not a folder; give DIR holding DIR/train/CLASS/*.png|jpg",
    ),
    "a train split smaller than one global batch": (
        ["recipe=quickstart", "batch_size=65536", "accelerator=cpu"],
        "the train split has 1293 samples, fewer than one global batch of 65536; lower batch_size or use fewer devices",
    ),
    "a net that cannot take the data": (
        ["recipe=quickstart", "net=user_nets.ThreeWay", "accelerator=cpu"],
        "the net (ThreeWay) gives 3 logit(s) per sample but the data has 10 classes",
    ),
}


def lightning_records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.split(".")[0] == "lightning"]


@pytest.mark.parametrize("case", CASES)
def test_a_refused_command_prints_exactly_one_line(case, missing, capfd, caplog):
    """capfd holds what the command prints; Lightning's records, had any come out, caplog (its handlers keep the
    stderr of their import, which in pytest is not the test's)."""
    argv, message = CASES[case]
    caplog.set_level(logging.INFO)
    assert main(["fit", *[a.format(missing=missing) for a in argv]]) == 2
    out, err = capfd.readouterr()
    assert out == ""
    if case == "a net that cannot take the data":
        assert err.count("\n") == 1 and err.startswith(f"xla_train: error: {message}"), err
    else:
        assert err == f"xla_train: error: {message.format(missing=missing)}\n"
    assert lightning_records(caplog) == []
    assert not (missing.parent / "runs").exists()


def test_a_refused_xla_command_prints_exactly_one_line(runtime, missing, capfd, caplog):
    """On either runtime, refused as the settings are read: the one line, and no Lightning record."""
    caplog.set_level(logging.INFO)
    assert main(["fit", "recipe=quickstart", "accelerator=xla", runtime_key(runtime), "batch_size=0"]) == 2
    assert capfd.readouterr() == ("", f"xla_train: error: {CASES['refused as the settings are read'][1]}\n")
    assert lightning_records(caplog) == [] and not (missing.parent / "runs").exists()


def test_the_program_itself_prints_one_line_when_refused_after_the_trainer_is_built(tmp_path):
    """As a user runs it: `python -m xla_train`, its stderr read whole."""
    proc = subprocess.run(
        [sys.executable, "-m", "xla_train", "recipe=images", f"data.path={tmp_path / 'none'}", "accelerator=cpu"],
        cwd=tmp_path,
        env=new_user_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"xla_train: error: data.path={tmp_path / 'none'} is not a folder; give DIR holding DIR/train/CLASS/*.png|jpg\n"
    )


def test_a_refusal_in_python_is_one_exception_and_prints_nothing(missing, capfd, caplog):
    caplog.set_level(logging.INFO)
    with pytest.raises(UserError) as e:
        xla_train.fit("images", data=None, accelerator="cpu", **{"data.path": str(missing)})
    assert str(e.value) == f"data.path={missing} is not a folder; give DIR holding DIR/train/CLASS/*.png|jpg"
    assert capfd.readouterr() == ("", "") and lightning_records(caplog) == []


def test_a_run_that_starts_prints_lightnings_lines_once_and_no_warning_our_defaults_raise(
    tmp_path, monkeypatch, capfd, caplog
):
    """A net instance, a 4-step epoch (under Lightning's log_every_n_steps of 50), bf16 on a CPU that has it."""
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(80, 4)).astype(np.float32), np.arange(80) % 2
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # hidden from users by Python's defaults
        xla_train.fit(net=torch.nn.Sequential(torch.nn.Linear(4, 2)), x=x, y=y, accelerator="cpu", epochs=1)
    shown = [f"{w.category.__name__}: {w.message}" for w in caught]
    assert shown == [], shown
    records = lightning_records(caplog)
    banner = [r for r in records if r.startswith("GPU available")]
    assert len(banner) == 1 and records.count("Seed set to 0") <= 1, records  # the seed's line may be quietened
    if "Seed set to 0" in records:  # by an earlier build_parts in this process (config/build.py)
        assert records.index("Seed set to 0") < records.index(banner[0])
    out, err = capfd.readouterr()
    assert "Warning" not in err and "warn" not in err.lower(), err
    assert "run folder: runs/arrays/version_0" in out
