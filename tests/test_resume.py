"""Nothing lost: a run killed mid-epoch (SIGKILL) or preempted (SIGTERM) resumes to the same weights."""

import json
import re
import sys

import numpy as np
import pytest
import torch

from helpers import cli_env, run_cli, run_paced, runtime_key
from xla_train.data.batching import BatchSampler
from xla_train.training.resume import PREEMPTED_EXIT_CODE

# 200 fixture images at batch 32: 6 steps an epoch, 2 epochs = 12 steps; last.ckpt every 2 steps,
# so a kill at step 9 (the 4th batch of epoch 2) finds the step-8 checkpoint, 2 batches into the epoch.
# val_fraction=0 keeps all 200 for training (validation on the test split): these tests are about resuming.
COMMON = (
    "recipe=cifar10",
    "epochs=2",
    "batch_size=32",
    "download=false",
    "test_after_fit=false",
    "checkpoint_every=2",
    "val_fraction=0",
    "--trainer.callbacks+=probes.RngDraws",  # draws from every RNG before each step, as user code would
)
# The CPU runs load their batches in a worker process, which reads its first indices as soon as a resumed run's
# loader starts, before Lightning sets the epoch (the XLA runs below load in process).
CPU = ("accelerator=cpu", "data.num_workers=1")


def final_weights(work):
    ckpts = sorted(work.glob("runs/cifar10/version_*/checkpoints/last.ckpt"))
    ckpt = torch.load(ckpts[-1], weights_only=True)
    return ckpt["global_step"], ckpt["state_dict"]


def stopped_at(step: int, *args: str, cwd, sig: str | None = None):
    """A fit that stops itself after `step` (tests/killer.py): SIGKILL, or `sig`; it must exit as that stop does."""
    kill = ("--trainer.callbacks+=killer.KillAt", f"--trainer.callbacks.init_args.step={step}")
    proc = run_cli(*args, *kill, *((f"--trainer.callbacks.init_args.sig={sig}",) if sig else ()), cwd=cwd, check=False)
    assert proc.returncode == (PREEMPTED_EXIT_CODE if sig else -9), proc.stderr[-2000:]
    return proc


def rng_draws(work) -> dict[int, dict]:
    """Each step's draws (tests/probes.py RngDraws) in the folder's runs; a resumed run's replace the killed one's."""
    lines = (work / "rng_draws.jsonl").read_text().splitlines()
    return {d["step"]: d for d in map(json.loads, lines)}


def assert_same_draws(resumed, uninterrupted, after: int, device: bool = False):
    """Every RNG's draw at every step equal, those after the resume included; and the RNGs really moved."""
    assert sorted(resumed) == sorted(uninterrupted) == list(range(12))
    assert resumed == uninterrupted, next(s for s in resumed if resumed[s] != uninterrupted[s])
    for rng in ("torch", "numpy", "python") + (("device",) if device else ()):
        assert len({resumed[s][rng] for s in range(after, 12)}) == 12 - after, rng  # a fresh draw each step


def assert_same_weights(a, b, tol):
    assert a[0] == b[0], f"global_step {a[0]} != {b[0]}"
    for k in a[1]:
        torch.testing.assert_close(a[1][k], b[1][k], atol=tol, rtol=0, msg=k)


@pytest.fixture(scope="module")
def uninterrupted_cpu(cifar_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("uninterrupted")
    run_cli(*COMMON, *CPU, f"data_dir={cifar_root}", cwd=work)
    return final_weights(work), rng_draws(work)


def test_resumed_sampler_neither_skips_nor_repeats():
    full = BatchSampler(100, 8, train=True, seed=5)
    full.set_epoch(2)
    order = list(full)
    resumed = BatchSampler(100, 8, train=True, seed=5)
    resumed.resume_at(2, 5)
    resumed.set_epoch(2)
    assert np.array_equal(np.concatenate(order[:5] + list(resumed)), np.concatenate(order))
    resumed.set_epoch(3)
    assert len(list(resumed)) == len(resumed)  # the skip applies to the interrupted epoch only


def test_a_resumed_loader_with_a_worker_serves_the_resumed_epoch():
    """Lightning iterates a resumed run's loader before it sets the sampler's epoch, and a DataLoader with workers
    reads its first indices then: the sampler must already be at the resumed epoch, past its trained batches."""
    from torch.utils.data import DataLoader

    from xla_train.data.batching import ArrayDataset

    full = BatchSampler(100, 8, train=True, seed=5)
    full.set_epoch(2)
    resumed = BatchSampler(100, 8, train=True, seed=5)
    resumed.resume_at(2, 5)
    data = ArrayDataset(np.arange(100)[:, None], np.arange(100))
    batches = iter(DataLoader(data, batch_size=None, sampler=resumed, num_workers=1))  # as Lightning's fetcher
    resumed.set_epoch(2)  # then Lightning's set_epoch
    served = [b[1].numpy() for b in batches]
    assert np.array_equal(np.concatenate(served), np.concatenate(list(full)[5:]))


@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")  # the
# data module resumes its own order (its state_dict); Lightning's warning is about the DataLoader
def test_compile_auto_counts_a_resumed_run_after_its_data_order_is_restored(tmp_path):
    """compile=auto counts the run's training samples (runtime/eager/fast_path.py), which has Lightning build the training
    loader and start iterating it. Counted in the callbacks' setup, before Lightning restores the data module from
    the checkpoint, the resumed run kept that loader and trained from the first batch of an epoch's order (on a CPU
    with AMX, where compile=auto counts: the SIGKILL test above ended 1e-3 off there)."""
    import lightning.pytorch as pl

    from xla_train import compat
    from xla_train.data.arrays import ArraysDataModule
    from xla_train.runtime import probe
    from xla_train.runtime.eager.fast_path import FastPath, FastPathCallback
    from xla_train.training.module import Classifier

    # as every run's plan does first: Lightning's device banner must not ask a TPU metadata server (in a worker
    # that imported JAX, which sets TPU_SKIP_MDS_QUERY, torch_xla's lookup raised a TypeError)
    compat.no_tpu_for_lightning(probe.tpu_chips())
    x, y = np.arange(64, dtype=np.float32)[:, None], np.arange(64) % 2  # a sample's input is its index
    ckpt = tmp_path / "mid_epoch_2.ckpt"

    class Record(pl.Callback):
        def __init__(self):
            self.seen = {}

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.seen[trainer.global_step] = batch[0].flatten().tolist()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx == 1 and not ckpt.exists():
                trainer.save_checkpoint(ckpt)

    def fit(ckpt_path=None) -> dict:
        dm = ArraysDataModule(batch_size=8, seed=0, val_fraction=0)
        dm.hold(x, y, validation_data=(x[:8], y[:8]))
        record = Record()
        trainer = pl.Trainer(
            accelerator="cpu",
            max_epochs=2,
            callbacks=[FastPathCallback(FastPath("32-true", False, "auto")), record],
            limit_val_batches=0,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=tmp_path,
        )
        trainer.fit(Classifier(torch.nn.Linear(1, 2)), datamodule=dm, ckpt_path=ckpt_path)
        return record.seen

    full = fit()
    resumed = fit(ckpt)
    after = len(full) // 2 + 2  # the checkpoint's global step: 2 batches into epoch 2
    assert resumed == {step: full[step] for step in range(after, len(full))}


def test_the_xla_device_loader_reads_its_sampler_only_at_the_first_batch():
    """Lightning calls iter() on the train loader before set_epoch() when it resumes a run; like a DataLoader,
    the device loader must serve the epoch set in between (torch_xla's MpDeviceLoader reads ahead in iter())."""
    code = """if True:
        import time, numpy as np, torch_xla
        from torch.utils.data import DataLoader
        from xla_train.data.batching import ArrayDataset, BatchSampler
        from xla_train.runtime.torch_xla.strategy import device_loader
        sampler = BatchSampler(64, 8, train=True, seed=3)
        loader = device_loader(DataLoader(ArrayDataset(np.arange(64), np.arange(64)), batch_size=None,
                                          sampler=sampler), torch_xla.device())
        batches = iter(loader)
        time.sleep(1.0)  # the work Lightning does between iter() and set_epoch()
        loader.sampler.set_epoch(2)
        print([int(i) for i in next(batches)[1].cpu()])"""
    proc = run_paced([sys.executable, "-c", code], 120, env=cli_env(1))
    assert proc.returncode == 0, proc.stderr[-2000:]
    epoch_2 = BatchSampler(64, 8, train=True, seed=3)
    epoch_2.set_epoch(2)
    assert proc.stdout.split("\n")[-2] == str(next(iter(epoch_2)).tolist())


def resumed_epoch_line(stdout: str) -> str:
    """The epoch line a run resumed 3 steps into epoch 2 of 2 prints: header, steps, and a real throughput."""
    assert "Epoch 2/2" in stdout, stdout
    line = next(ln for ln in stdout.splitlines() if ln.startswith("6/6"))
    assert line.startswith("6/6 (3 after resume) - "), line
    assert float(re.search(r"([\d,.]+) samples/s", line).group(1).replace(",", "")) > 1, line
    return line


def test_same_seed_same_weights_on_cpu(uninterrupted_cpu, cifar_root, tmp_path):
    run_cli(*COMMON, *CPU, f"data_dir={cifar_root}", cwd=tmp_path)
    assert_same_weights(final_weights(tmp_path), uninterrupted_cpu[0], tol=0)


def test_sigkill_mid_epoch_then_resume_gives_the_same_weights(uninterrupted_cpu, cifar_root, tmp_path):
    """The weights, and every draw from torch's, numpy's and Python's RNGs after the resume (the CNN itself draws
    only torch's, for dropout; user code draws the others), are the uninterrupted run's."""
    stopped_at(9, *COMMON, *CPU, f"data_dir={cifar_root}", cwd=tmp_path)
    assert final_weights(tmp_path)[0] == 8  # the step-8 checkpoint, mid epoch 2, survived the kill
    run_cli(*COMMON, *CPU, f"data_dir={cifar_root}", "ckpt=last", cwd=tmp_path)
    assert_same_weights(final_weights(tmp_path), uninterrupted_cpu[0], tol=1e-6)
    assert_same_draws(rng_draws(tmp_path), uninterrupted_cpu[1], after=8)


@pytest.mark.slow  # default-suite time; every RNG after a resume: test_sigkill_mid_epoch_then_resume_gives_the_same_weights
def test_numpy_and_python_rngs_drawn_in_training_resume_where_they_were(cifar_root, tmp_path):
    """GlobalRngCifar augments every training batch from np.random and random: a resumed run gives the
    uninterrupted run's weights only if both RNGs come back as they were at the checkpoint (RngState)."""
    rng_data = (
        "data.class_path=probes.GlobalRngCifar",
        f"data_dir={cifar_root}",
        "accelerator=cpu",
        "model.net.class_path=probes.TinyNet",
    )  # the subject is the data's RNGs, not the model
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    run_cli(*COMMON, *rng_data, cwd=a)
    stopped_at(9, *COMMON, *rng_data, cwd=b)
    assert final_weights(b)[0] == 8
    run_cli(*COMMON, *rng_data, "ckpt=last", cwd=b)
    assert_same_weights(final_weights(b), final_weights(a), tol=1e-6)


def test_sigterm_finishes_the_step_saves_and_exits_with_the_preemption_code(uninterrupted_cpu, cifar_root, tmp_path):
    args = (*COMMON, *CPU, f"data_dir={cifar_root}")
    stopped = stopped_at(9, *args, cwd=tmp_path, sig="SIGTERM")
    assert "stopped by signal after step 9" in stopped.stderr and "ckpt=last" in stopped.stderr
    assert final_weights(tmp_path)[0] == 9
    resumed = run_cli(*args, "ckpt=last", cwd=tmp_path)
    assert_same_weights(final_weights(tmp_path), uninterrupted_cpu[0], tol=1e-6)
    assert_same_draws(rng_draws(tmp_path), uninterrupted_cpu[1], after=9)
    resumed_epoch_line(resumed.stdout)


def test_sigint_is_a_clean_stop_too(cifar_root, tmp_path):
    stopped_at(3, *COMMON, *CPU, f"data_dir={cifar_root}", "epochs=1", cwd=tmp_path, sig="SIGINT")
    assert final_weights(tmp_path)[0] == 3


# A tiny net with dropout, the data on the device with crops and flips drawn there, its steps a While loop of an
# epoch's 6 in groups of 2 between checkpoints, so that a SIGTERM lands inside a group, where a step numbered one too
# far on would draw another mask. Each runtime's tolerance, and whether its device RNG has a state that moves every
# step (torch_xla's generator) or none (JAX's key is the run's seed folded with the step's number).
RESUMED = (
    "model.net.class_path=probes.TinyNet",
    "model.net.init_args.dropout=0.5",
    "trainer.limit_val_batches=1",
    "execution_loop=while",
    "augment=true",
    "on_device=true",
)
RESUMED_ON = {"torch_xla": (1e-5, True), "jax": (1e-6, False)}


@pytest.mark.parametrize("sig", [pytest.param(None, marks=pytest.mark.slow), "SIGTERM"])  # SIGKILL (None): depth
def test_xla_sigterm_then_resume_matches_the_uninterrupted_run(runtime, cifar_root, tmp_path, sig):
    """Killed at step 9 and resumed from the step-8 checkpoint (SIGKILL), or stopped by SIGTERM after step 9, which
    saves then: the resumed run ends at the weights of the run that was never stopped, and draws from every RNG, the
    device's included, what it drew: dropout's masks and the crops and flips drawn on the device come from the seed,
    which the checkpoint keeps (a lost or redrawn crop moves weights by 1e-3). On torch_xla the resumed run
    recompiles its graphs, and XLA may fuse the first step after a restore differently from the steady step, so
    float results can differ in the last bits; 1e-5 absolute allows that and still fails on any skipped, repeated or
    reordered batch. The run's seed is not the default 0: a resumed JAX run that fell back to seed 0's key would draw
    other masks."""
    tol, device_moves = RESUMED_ON[runtime]
    args = (*COMMON, "accelerator=xla", runtime_key(runtime), f"data_dir={cifar_root}", "seed=42", *RESUMED)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    first = run_cli(*args, cwd=a)
    assert "as an XLA While loop" in first.stdout and "data: on the device (" in first.stdout, first.stdout[-3000:]
    stopped_at(9, *args, cwd=b, sig=sig)
    at = 8 if sig is None else 9
    assert final_weights(b)[0] == at
    resumed = run_cli(*args, "ckpt=last", cwd=b)
    assert_same_weights(final_weights(b), final_weights(a), tol=tol)
    assert_same_draws(rng_draws(b), rng_draws(a), after=at, device=device_moves)
    assert "compile" in resumed_epoch_line(resumed.stdout)  # the new process's compiles are counted, not hidden
