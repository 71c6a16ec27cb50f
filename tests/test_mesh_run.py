"""A short fit on two XLA:CPU devices, on each runtime, read back from the programs XLA compiled (dumped as HLO
text) and from what the run reports: each device computes its share of every batch, the matmuls run at the
precision asked for, and the best checkpoint, not the last, is the one tested after the fit.

The same numbers come out whether a batch is split over the devices or computed whole on each, so only the compiled
programs show a mesh that does not share the work: a pod slice that trains no faster than one chip."""

import math
import re

import pytest

from helpers import SUITE_XLA_FLAGS, cli_env, epoch_value, metrics_rows, path_with_tests, run_cli, runtime_key

DEVICES, PER_DEVICE = 2, 8  # batch_size is each device's share: a global batch of 16
GLOBAL = DEVICES * PER_DEVICE
STEPS = 24
FIT = (
    "fit",
    "recipe=quickstart",
    "net=probes.TinyNet",
    "data.class_path=probes.ForgettingDigits",  # epoch 2 unlearns epoch 1: the best epoch is not the last
    "on_device=false",  # streamed: each batch is placed on the mesh as it comes
    "accelerator=xla",
    f"devices={DEVICES}",
    f"batch_size={PER_DEVICE}",
    "epochs=2",
    "lr=0.01",
    f"trainer.limit_train_batches={STEPS}",  # an epoch's steps, run as one program
    "matmul_precision=high",
    "test_after_fit=true",
    "predict_samples=0",
)


def dumped_env(folder) -> dict:
    """The suite's XLA environment on DEVICES devices, every program XLA compiles written to `folder` as HLO text."""
    flags = f"{SUITE_XLA_FLAGS} --xla_dump_to={folder} --xla_dump_hlo_as_text"
    return cli_env(DEVICES, XLA_FLAGS=flags, PYTHONPATH=path_with_tests())


@pytest.fixture(scope="module")
def mesh_runs(tmp_path_factory):
    """runtime -> (run folder, fit's process, predict's process, fit's HLO folder, predict's HLO folder): FIT, then
    its best checkpoint predicting the test split in a fresh process on the same devices; once per runtime."""
    done = {}

    def fit(runtime: str):
        if runtime not in done:
            work = tmp_path_factory.mktemp(f"mesh_{runtime}")
            fitted = run_cli(*FIT, runtime_key(runtime), cwd=work, env=dumped_env(work / "hlo_fit"))
            run = work / "runs" / "quickstart" / "version_0"
            (best,) = run.glob("checkpoints/best-*.ckpt")
            predicted = run_cli(
                "predict",
                f"ckpt={best}",
                "split=test",
                "net=probes.TinyNet",
                "accelerator=xla",
                f"devices={DEVICES}",
                runtime_key(runtime),
                cwd=work,
                env=dumped_env(work / "hlo_predict"),
            )
            done[runtime] = run, fitted, predicted, work / "hlo_fit", work / "hlo_predict"
        return done[runtime]

    return fit


@pytest.fixture
def mesh_run(mesh_runs, runtime):
    return mesh_runs(runtime)


SHAPE = re.compile(r"^\s*%?\S+ = (\w+)\[([\d,]*)\]\S* parameter\(\d+\)", re.M)
IMAGE = [32, 32, 3]  # a digit as the quickstart streams it: uint8, height, width, channels


def entry_parameters(text: str) -> list[tuple[str, list[int]]]:
    """The (dtype, dims) of a compiled module's entry parameters: after the partitioner, each device's own."""
    entry = text[text.index("\nENTRY ") :]
    entry = entry[: entry.index("\n}")]
    return [(t, [int(d) for d in dims.split(",") if d]) for t, dims in SHAPE.findall(entry)]


def images_per_device(folder) -> list[int]:
    """For each program XLA compiled that reads images, how many of them each device is handed: K steps' batches
    count K times, whether the runtime passes them stacked (JAX) or one by one (torch_xla)."""
    found = []
    for path in sorted(folder.glob("*after_optimizations.txt")):
        shapes = entry_parameters(path.read_text())
        images = sum(math.prod(dims[:-3]) for t, dims in shapes if t == "u8" and dims[-3:] == IMAGE)
        if images:
            found.append(images)
    return found


def test_each_device_trains_on_its_share_of_the_batch(mesh_run):
    """The training program (24 steps as one) hands each device 24 times its share of a global batch, not 24 whole
    batches."""
    _, fitted, _, hlo, _ = mesh_run
    assert "steps per execution: 24 " in fitted.stdout, fitted.stdout[-2000:]
    found = images_per_device(hlo)
    assert max(found) == STEPS * PER_DEVICE, (found, STEPS * GLOBAL)


def test_each_device_evaluates_and_predicts_its_share_of_the_batch(mesh_run):
    """Validation and the test after the fit (the fit's other programs), and a split predicted in a fresh process:
    each device is handed its share of every batch."""
    _, _, _, fit_hlo, predict_hlo = mesh_run
    evaluated = sorted(images_per_device(fit_hlo))[:-1]  # all but the training program
    assert evaluated and set(evaluated) == {PER_DEVICE}, (evaluated, GLOBAL)
    assert images_per_device(predict_hlo) == [PER_DEVICE], (images_per_device(predict_hlo), GLOBAL)


def dot_precisions(folder) -> set[str]:
    return {
        m
        for path in folder.glob("*before_optimizations.txt")
        for line in path.read_text().splitlines()
        if " dot(" in line
        for m in [re.search(r"operand_precision=\{(\w+)", line)]
        for m in [m.group(1) if m else "default"]
    }


def test_matmul_precision_high_compiles_every_matmul_at_high(mesh_run):
    """matmul_precision=high is XLA's HIGH (on a TPU, bf16 in three passes), not HIGHEST (full float32) or the
    default (one bf16 pass), in every matmul of every program the fit compiled."""
    _, _, _, hlo, _ = mesh_run
    assert dot_precisions(hlo) == {"high"}, dot_precisions(hlo)


def test_a_fit_whose_best_epoch_is_not_the_last_tests_the_best_checkpoint(mesh_run):
    """test_after_fit tests the best checkpoint in the fit's own process, after the last epoch's weights trained
    there: the accuracy it reports is the best checkpoint's, as a fresh process predicting the split computes it."""
    run, fitted, predicted, _, _ = mesh_run
    val_acc = epoch_value(metrics_rows(run), "val_acc")
    assert val_acc[0] > val_acc[1] + 0.2, val_acc  # the first epoch is the best, by far
    tested = re.search(r"held-out test accuracy: ([\d.]+) \(best checkpoint (\S+)\)", fitted.stdout)
    assert tested and tested.group(2).endswith("best-epoch=1.ckpt"), fitted.stdout[-2000:]
    fresh = re.search(r"^accuracy ([\d.]+)$", predicted.stdout, re.M)
    assert fresh and tested.group(1) == fresh.group(1), (tested.group(0), predicted.stdout)
