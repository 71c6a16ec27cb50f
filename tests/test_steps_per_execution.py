"""steps_per_execution=K: K training steps traced once and run as one XLA program train exactly as K steps.

Each comparison runs the real command twice, K=1 and K=8, with the same seed,
and compares the final weights and every epoch metric. Steps that run in
different programs are fused differently by XLA, so float results may differ in
the last bits; Adam turns such differences in a near-zero gradient into
differences of up to a fraction of the learning rate, which is why the batches
here are not the smallest possible (README, "Keep a TPU fed"). A skipped,
repeated or reordered batch, a wrong learning rate or a wrong dropout seed moves
the weights by about 1e-3.
"""
import csv

import pytest
import torch

from conftest import run_cli, write_cifar10
from test_imdb import write_aclimdb
from xla_train.training.resume import PREEMPTED_EXIT_CODE

# 200 fixture images at batch 16: 12 steps an epoch (a group of 8, then 4); max_steps=16 stops 4 steps into epoch 2.
# val_fraction=0 (validation on the test split) keeps every training image, and these step counts, in training.
NO_HOLDOUT = "val_fraction=0"
CNN = ("recipe=cifar10", "accelerator=xla", "epochs=2", "batch_size=16", "trainer.max_steps=16",
       "trainer.limit_val_batches=2", "download=false", "test_after_fit=false", NO_HOLDOUT)
METRICS = ("train_loss", "train_acc", "val_loss", "val_acc")


def fit(work, *args, devices=1, check=True):
    work.mkdir(exist_ok=True)
    return run_cli("fit", *args, cwd=work, devices=devices, check=check)


def last_checkpoint(work) -> dict:
    return torch.load(sorted(work.glob("runs/*/version_*/checkpoints/last.ckpt"))[-1], weights_only=True)


def epochs(work) -> dict[int, dict[str, float]]:
    path = sorted(work.glob("runs/*/version_*/metrics.csv"))[-1]
    out: dict[int, dict[str, float]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            out.setdefault(int(row["epoch"]), {}).update({k: float(v) for k, v in row.items()
                                                         if v and k not in ("epoch", "step")})
    return out


def assert_same_training(a, b, tol=1e-5, first_epoch=0):
    """Same step count, weights and optimizer state; the same metrics for every epoch from `first_epoch` (a
    resumed run's interrupted epoch reports only the steps after the resume)."""
    ca, cb = last_checkpoint(a), last_checkpoint(b)
    assert ca["global_step"] == cb["global_step"] == 16
    for k in ca["state_dict"]:
        torch.testing.assert_close(ca["state_dict"][k], cb["state_dict"][k], atol=tol, rtol=0, msg=k)
    sa, sb = ca["optimizer_states"][0]["state"], cb["optimizer_states"][0]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:  # the optimizer state is torch.optim's own, whichever K wrote it
        assert sa[i].keys() == sb[i].keys()
        for k in sa[i]:
            torch.testing.assert_close(sa[i][k], sb[i][k], atol=tol, rtol=1e-4, msg=f"{i}.{k}")
    ea, eb = epochs(a), epochs(b)
    assert ea.keys() == eb.keys() and len(ea) >= 2
    for e in [e for e in ea if e >= first_epoch]:
        for k in METRICS:
            if k in ea[e] or k in eb[e]:
                assert abs(ea[e][k] - eb[e][k]) < 1e-5, (e, k, ea[e][k], eb[e][k])


@pytest.fixture(scope="module")
def cnn_runs(cifar_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("spe")
    procs = {k: fit(work / f"k{k}", *CNN, f"data_dir={cifar_root}", f"steps_per_execution={k}") for k in (1, 8)}
    return {k: work / f"k{k}" for k in procs}, procs


def test_eight_steps_per_execution_train_as_one_at_a_time_cnn(cnn_runs):
    runs, _ = cnn_runs
    assert_same_training(runs[1], runs[8])


def test_eight_steps_per_execution_compile_once_even_with_a_remainder(cnn_runs):
    """Epoch 1 runs a group of 8 and one of 4, epoch 2 one of 4: the same program, so epoch 2 compiles nothing."""
    runs, procs = cnn_runs
    one, eight = epochs(runs[1]), epochs(runs[8])
    assert eight[1]["xla_compiles"] == 0, eight
    assert eight[0]["xla_compiles"] <= one[0]["xla_compiles"] + 1, (one, eight)
    assert "compile 0.0 s (0 graphs)" in procs[8].stdout
    assert "12/12 - " in procs[8].stdout and "ms/step (host " in procs[8].stdout  # progress counts single steps


@pytest.mark.slow  # default-suite time; SIGTERM in a group stays in the default suite
def test_resume_mid_group_ends_at_the_uninterrupted_weights(cnn_runs, cifar_root, tmp_path):
    """A checkpoint every 5 steps falls inside a group of 8: the kept steps run first, so it holds step 10
    exactly; killed at step 11, the run resumes there and ends where the uninterrupted K=8 run ended."""
    runs, _ = cnn_runs
    args = (*CNN, f"data_dir={cifar_root}", "steps_per_execution=8", "checkpoint_every=5")
    killed = fit(tmp_path, *args, "--trainer.callbacks+=killer.KillAt", "--trainer.callbacks.init_args.step=11",
                 check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert last_checkpoint(tmp_path)["global_step"] == 10
    fit(tmp_path, *args, "ckpt=last")
    assert_same_training(runs[8], tmp_path, first_epoch=1)


def test_a_sigterm_inside_a_group_saves_every_counted_step(cifar_root, tmp_path):
    stopped = fit(tmp_path, *CNN, f"data_dir={cifar_root}", "steps_per_execution=8",
                  "--trainer.callbacks+=killer.KillAt", "--trainer.callbacks.init_args.step=3",
                  "--trainer.callbacks.init_args.sig=SIGTERM", check=False)
    assert stopped.returncode == PREEMPTED_EXIT_CODE, stopped.stderr[-2000:]
    ckpt = last_checkpoint(tmp_path)
    assert ckpt["global_step"] == 3 and int(ckpt["optimizer_states"][0]["state"][0]["step"]) == 3


@pytest.mark.slow  # default-suite time; the CNN's K=8 comparison stays in the default suite
def test_eight_steps_per_execution_train_as_one_at_a_time_lstm(tmp_path):
    data = write_aclimdb(tmp_path / "data", per_class=40)  # 81 training reviews: 10 steps of 8 an epoch
    args = ("recipe=imdb", "accelerator=xla", "maxlen=64", "model.net.embed_dim=32", "lr=0.01", "download=false",
            "batch_size=8", "epochs=2", "trainer.max_steps=16", "test_after_fit=false", f"data_dir={data}", NO_HOLDOUT)
    for k in (1, 8):
        fit(tmp_path / f"k{k}", *args, f"steps_per_execution={k}")
    assert_same_training(tmp_path / "k1", tmp_path / "k8")


@pytest.mark.slow
def test_eight_steps_per_execution_train_as_one_at_a_time_resnet(cifar_root, tmp_path):
    """SGD with Nesterov momentum and weight decay, and BatchNorm's running statistics in the carried state."""
    args = (*CNN, "recipe=cifar10_resnet", "depth=8", f"data_dir={cifar_root}")
    for k in (1, 8):
        fit(tmp_path / f"k{k}", *args, f"steps_per_execution={k}")
    assert_same_training(tmp_path / "k1", tmp_path / "k8")


@pytest.mark.slow
@pytest.mark.parametrize("net", ["lstm", "resnet"])
def test_eight_steps_per_execution_under_spmd_lstm_and_resnet(net, cifar_root, tmp_path):
    """The scan LSTM and the ResNet's BatchNorm (reduction form under SPMD) on 8 devices, with SGD as below."""
    if net == "lstm":
        data = write_aclimdb(tmp_path / "data", per_class=256)  # 513 reviews: 8 steps of 8 x 8 an epoch
        args = ("recipe=imdb", "maxlen=64", "model.net.embed_dim=32", "epochs=2")
    else:
        data = write_cifar10(tmp_path / "data", per_batch=205)
        args = ("recipe=cifar10_resnet", "depth=8", "epochs=2", "batch_size=16")
    args = (*args, "accelerator=xla", "devices=8", "model.optimizer=sgd", "lr=0.01", "trainer.limit_val_batches=1",
            "download=false", "test_after_fit=false", f"data_dir={data}", NO_HOLDOUT)
    for k in (1, 8):
        fit(tmp_path / f"k{k}", *args, *(("batch_size=8",) if net == "lstm" else ()), f"steps_per_execution={k}",
            devices=8)
    assert_same_training(tmp_path / "k1", tmp_path / "k8")


@pytest.mark.slow
def test_eight_steps_per_execution_under_spmd_on_eight_devices(tmp_path):
    """8 devices x 16 images: 1,025 fixture images make 8 steps an epoch, 16 in two epochs.

    With SGD: the partitioner splits the two programs' reductions differently, and Adam answers a near-zero
    gradient's last bits with up to a whole learning-rate step (measured 1.3e-4 here after 16 steps, against
    1.2e-7 with SGD; README, "Keep a TPU fed"), which would hide what this test is for."""
    data = write_cifar10(tmp_path / "data", per_batch=205)
    args = ("recipe=cifar10", "accelerator=xla", "devices=8", "epochs=2", "batch_size=16", "model.optimizer=sgd",
            "lr=0.01", "trainer.limit_val_batches=1", "download=false", "test_after_fit=false", f"data_dir={data}",
            NO_HOLDOUT)
    for k in (1, 8):
        fit(tmp_path / f"k{k}", *args, f"steps_per_execution={k}", devices=8)
    assert_same_training(tmp_path / "k1", tmp_path / "k8")
    assert epochs(tmp_path / "k8")[1]["xla_compiles"] == 0


@pytest.mark.parametrize("value, message", [
    ("0", "steps_per_execution: not of type PositiveInt: 0 does not conform"),
    ("-3", "steps_per_execution: not of type PositiveInt: -3 does not conform"),
    ("eight", "steps_per_execution: not of type PositiveInt"),
    ("13", "steps_per_execution=13 is more than the 12 training steps of an epoch; use at most 12"),
])
def test_a_bad_steps_per_execution_is_one_line(cifar_root, tmp_path, value, message):
    proc = fit(tmp_path, *CNN, f"data_dir={cifar_root}", f"steps_per_execution={value}", check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


def test_steps_per_execution_is_refused_off_xla(cifar_root, tmp_path):
    proc = fit(tmp_path, *CNN, "accelerator=cpu", f"data_dir={cifar_root}", "steps_per_execution=8", check=False)
    assert proc.returncode == 2 and "accelerator=cpu runs one step at a time, so leave it at 1" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()
