"""fit through the real CLI, on the XLA path (XLA:CPU here) and on eager CPU."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import yaml

from helpers import cli_env, epoch_value, metrics_rows, path_with_tests, require, run_cli, runtime_key


@pytest.fixture(scope="module")
def xla_runs(cifar_root, tmp_path_factory):
    """fit(runtime) -> (run folder, process): the CNN fit on XLA, once per runtime for the module."""
    done = {}

    def fit(runtime: str):
        if runtime not in done:
            work = tmp_path_factory.mktemp(f"xla_run_{runtime}")
            proc = run_cli(
                *"fit recipe=cifar10 accelerator=xla devices=1 epochs=2 batch_size=32 download=false".split(),
                runtime_key(runtime),
                f"data_dir={cifar_root}",
                "--trainer.callbacks+=probes.LibraryLoads",
                f"--trainer.callbacks.init_args.out={work / 'loads.json'}",
                "--trainer.callbacks+=probes.TestCompiles",
                f"--trainer.callbacks.init_args.out={work / 'test_compiles.json'}",
                cwd=work,
            )
            done[runtime] = work / "runs" / "cifar10" / "version_0", proc
        return done[runtime]

    return fit


@pytest.fixture
def xla_run(xla_runs, runtime):
    return xla_runs(runtime)


def test_an_xla_step_opens_no_library_though_lightning_set_its_nvml_check(xla_runs):
    """Lightning's import sets PYTORCH_NVML_BASED_CUDA_CHECK=1, with which every Adam step would dlopen
    libnvidia-ml mid-trace (runtime/torch_xla/accelerators.py); the XLA accelerator lifts it for the run."""
    run, _ = xla_runs("torch_xla")
    seen = json.loads((run.parents[2] / "loads.json").read_text())
    assert len(seen["steps"]) == 10, seen
    assert all(s == {"opened": 0, "nvml_check": None} for s in seen["steps"]), seen["steps"]
    if torch.backends.cuda.is_built():  # the control: with the check set, torch does open a library
        assert seen["control"] >= 1, seen


def test_fit_trims_the_host_heap_after_its_first_steps_and_every_epoch(xla_run):
    """training/host_memory.py's trim (tests/test_host_memory.py) runs after each of the first 8 of the run's 10
    steps, where the compiler's memory has been freed, and after each of its 2 epochs."""
    run, _ = xla_run
    seen = json.loads((run.parents[2] / "loads.json").read_text())
    assert len(seen["steps"]) == 10 and seen["heap_trims"] == [8 + 2], seen


def test_batch_norm_counters_moved_to_the_device_as_data_count_every_step(xla_run):
    """The net's 0-dim buffers go to the device as data, not as the IR constants .to() makes of a 0 or a 1
    (runtime/torch_xla/strategy.py); each BatchNorm's num_batches_tracked still counts the run's 10 steps."""
    run, _ = xla_run
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    counters = {k: int(v) for k, v in state.items() if k.endswith("num_batches_tracked")}
    assert len(counters) == 2 and set(counters.values()) == {10}, counters
    assert {v.dtype for k, v in state.items() if k.endswith("num_batches_tracked")} == {torch.int64}  # as torch's
    moved = [v.sub(1).abs().max() for k, v in state.items() if k.endswith("running_var")]
    assert len(moved) == 2 and min(moved) > 1e-3, moved  # the statistics moved (torchax as shipped left them)


def test_xla_fit_compiles_in_epoch_one_and_never_again(xla_run):
    run, proc = xla_run
    compiles = epoch_value(metrics_rows(run), "xla_compiles")
    assert compiles[0] >= 1, compiles
    assert compiles[1] == 0, f"epoch 2 recompiled: {compiles}"
    assert "epoch 2  " in proc.stdout and "compile 0.0 s (0 graphs)" in proc.stdout


def test_the_first_training_step_compiles_the_program_every_later_step_runs(xla_run):
    """One training program: auto runs every step through the program its first step traced, Adam's state sent as
    data before it (runtime/torch_xla/engine.py), where torch's first step made that state inside its own graph,
    a second program compiled for that step alone (Lightning's own step: tests/test_optimizer_state.py)."""
    _, proc = xla_run
    assert "steps per execution: 1 (auto" in proc.stdout, proc.stdout
    assert re.search(r"compiled graphs by phase: train 1 \(", proc.stdout), proc.stdout


@pytest.mark.runtime_marks(jax=pytest.mark.xfail(strict=True, reason="JAX compiles the test's step as its own program"))
def test_the_test_runs_the_validation_program_over_the_resident_splits(xla_run):
    """Validation and test batches read one table of both splits on the device (data/batching.py), so the test
    compiles nothing after the validations: with a table each, their shapes differed and the test compiled its
    own program."""
    run, proc = xla_run
    assert "data: on the device" in proc.stdout, proc.stdout
    seen = json.loads((run.parents[2] / "test_compiles.json").read_text())
    assert seen == {"validations": 3, "test_compiles": 0}, seen  # the sanity check and 2 epochs


def test_keras_style_lines_agree_with_the_logged_metrics(xla_run):
    run, proc = xla_run
    rows = metrics_rows(run)
    lines = [
        ln for ln in proc.stdout.splitlines() if re.match(r"\d+/\d+ - \d+m?s \d+ms/step \(host [\d.]+ms\) - loss: ", ln)
    ]
    assert len(lines) == 2, proc.stdout
    host = epoch_value(rows, "xla_host_ms_per_step")  # the host's share of a step, from host clocks alone
    for epoch, line in enumerate(lines):
        step_ms = float(re.search(r"(\d+)ms/step", line).group(1))
        shown_host = float(re.search(r"\(host ([\d.]+)ms\)", line).group(1))
        assert shown_host == pytest.approx(host[epoch], abs=0.051) and 0 < host[epoch] <= step_ms * 1.1 + 1, line
        shown = dict(re.findall(r"(\w+): ([\d.]+)", line))
        for name, key in (
            ("loss", "train_loss"),
            ("acc", "train_acc"),
            ("val_loss", "val_loss"),
            ("val_acc", "val_acc"),
        ):
            assert float(shown[name]) == pytest.approx(epoch_value(rows, key)[epoch], abs=1e-4), (name, line)
    summary = next(ln for ln in proc.stdout.splitlines() if ln.startswith("epoch 1  "))
    assert re.fullmatch(r"epoch 1  [\d.]+ s \(compile [\d.]+ s\)  \|  epoch 2  [\d.]+ s \(compile 0\.0 s\)", summary)


def test_xla_fit_writes_a_complete_run_folder(xla_run):
    run, proc = xla_run
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["trainer"]["max_epochs"] == 2 and config["seed_everything"] == 0
    assert config["data"]["init_args"]["batch_size"] == 32
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    # the final state, whether or not val_acc improved: 180 training images (20 held out for validation), 5 steps
    assert (last["epoch"], last["global_step"]) == (1, 10)
    rows = metrics_rows(run)
    for key in ("train_loss", "train_acc", "val_loss", "val_acc", "samples_per_s"):
        assert len(epoch_value(rows, key)) == 2, key
    assert proc.stdout.count(f"run folder: {run.relative_to(run.parents[2])}") == 2
    assert "held-out test accuracy:" in proc.stdout
    assert config["data"]["init_args"]["val_fraction"] == 0.1


def test_after_fit_lightning_does_not_repeat_which_checkpoint_the_report_named(xla_run):
    """test_after_fit loads the best checkpoint, and Lightning logged "Restoring states from the checkpoint path at
    ..." and "Loaded model weights from the checkpoint at ...": the run report's lines already name that checkpoint, by
    its epoch and file, and the test's result with its path. Those two lines are left out, and only those."""
    run, proc = xla_run
    best = re.search(r"^best checkpoint: epoch (\d+) \((best-epoch=\d+\.ckpt)\)", proc.stdout, re.M)
    assert best, proc.stdout
    path = run.relative_to(run.parents[2]) / "checkpoints" / best[2]
    assert "held-out test accuracy: " in proc.stdout and f"(best checkpoint {path})" in proc.stdout, proc.stdout
    out = proc.stdout + proc.stderr
    for line in ("Restoring states from the checkpoint path", "Loaded model weights from the checkpoint"):
        assert line not in out, out


def test_val_fraction_zero_validates_on_test_and_the_final_line_does_not_say_held_out(cifar_root, tmp_path):
    proc = run_cli(
        *"fit recipe=cifar10 accelerator=cpu devices=1 epochs=1 batch_size=32 val_fraction=0 download=false".split(),
        f"data_dir={cifar_root}",
        cwd=tmp_path,
    )
    run = tmp_path / "runs" / "cifar10" / "version_0"
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["init_args"]["val_fraction"] == 0.0
    line = next(ln for ln in proc.stdout.splitlines() if "test accuracy" in ln)
    assert "held-out" not in line and line.startswith("test accuracy (not held out: val_fraction=0"), line
    # validation ran on the test split: its accuracy is the test accuracy of the same (only) weights
    val_acc = epoch_value(metrics_rows(run), "val_acc")[0]
    assert float(re.search(r": ([\d.]+) \(best", line).group(1)) == pytest.approx(val_acc, abs=1e-4)


def test_xla_checkpoint_loads_where_no_runtime_is_ever_imported(xla_run):
    run, _ = xla_run
    code = f"""
import sys, torch
ckpt = torch.load({str(run / "checkpoints" / "last.ckpt")!r}, weights_only=True)  # no map_location
devices = {{t.device.type for t in ckpt["state_dict"].values()}}
assert devices == {{"cpu"}}, devices
from xla_train import load_for_inference
p = load_for_inference({str(run / "checkpoints" / "last.ckpt")!r})
import numpy as np
print(p.predict(np.zeros((2, 32, 32, 3), np.uint8)))
assert not {{"torch_xla", "jax", "torchax", "lightning"}} & set(sys.modules), sys.modules.keys()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_an_xla_checkpoint_exports_a_program_that_predicts_as_the_checkpoint_does(
    xla_run, cifar_root, relaxed_cifar_checks, tmp_path
):
    """The best checkpoint each runtime writes, exported to .pt2 on the CPU: the program's probabilities are
    load_for_inference's, on the test images (docs/serving.md)."""
    import shutil

    import numpy as np

    from xla_train.data.cifar10 import CIFAR10DataModule
    from xla_train.serve.export import export
    from xla_train.serve.predictor import load_for_inference

    run, _ = xla_run
    ckpt = shutil.copy(next((run / "checkpoints").glob("best-*.ckpt")), tmp_path / "best.ckpt")
    program = torch.export.load(export(ckpt, "pt2", None, None, None)).module()
    images = CIFAR10DataModule(data_dir=str(cifar_root), download=False).arrays("test")[0][:16]
    expected = load_for_inference(ckpt).probabilities(images).numpy()
    with torch.no_grad():
        found = program(torch.from_numpy(images)).numpy()  # the program ends in the softmax
    assert np.ptp(expected, axis=0).max() > 0.01  # inputs the net tells apart
    np.testing.assert_allclose(found, expected, atol=1e-5)


def test_cpu_fit_trains_and_logs(cpu_run):
    rows = metrics_rows(cpu_run)
    assert epoch_value(rows, "train_acc")[0] > 0
    assert "xla_compiles" not in rows[0]
    assert (cpu_run / "checkpoints" / "last.ckpt").is_file()


def test_a_new_run_never_overwrites_an_old_one(cpu_run, cifar_root):
    work = cpu_run.parents[2]
    before = (cpu_run / "checkpoints" / "last.ckpt").read_bytes()
    run_cli(
        "fit",
        "recipe=cifar10",
        "accelerator=cpu",
        "epochs=1",
        "batch_size=32",
        "trainer.limit_train_batches=1",
        f"data_dir={cifar_root}",
        "download=false",
        "test_after_fit=false",
        cwd=work,
    )
    assert (work / "runs" / "cifar10" / "version_1" / "config.yaml").is_file()
    assert (cpu_run / "checkpoints" / "last.ckpt").read_bytes() == before


def test_validate_and_test_commands_report_metrics(cpu_run, cifar_root):
    ckpt = cpu_run / "checkpoints" / "last.ckpt"
    work = cpu_run.parents[2]
    runs = sorted(p.name for p in cpu_run.parent.iterdir())
    evals = sorted(cpu_run.glob("eval_*"))
    for command, key in (("validate", "val_acc"), ("test", "test_acc")):
        proc = run_cli(
            command,
            "recipe=cifar10",
            "accelerator=cpu",
            "batch_size=32",
            f"ckpt={ckpt}",
            f"data_dir={cifar_root}",
            "download=false",
            cwd=work,
        )
        assert key in proc.stdout
        # Lightning's restore says only what it restores: no warning about the run folder's checkpoint state
        assert "Warning" not in proc.stderr and "dirpath" not in proc.stderr, proc.stderr
        # the results go beside the checkpoint's run, in a new eval_K; no version_N that looks like a training run
        new = sorted(set(cpu_run.glob("eval_*")) - set(evals))
        assert len(new) == 1 and key in (new[0] / "metrics.csv").read_text(), new
        assert (new[0] / "config.yaml").is_file() and not (new[0] / "checkpoints").exists()
        evals.append(new[0])
    assert sorted(p.name for p in cpu_run.parent.iterdir()) == runs


def test_two_cpu_processes_validate_every_sample_once(tmp_path):
    """accelerator=cpu devices=2 is Lightning's DDP over two processes: each takes its share of the quickstart's 144
    validation samples in batches of 32, the last batch padded, and the metrics are synced. Every sample counts once,
    so the accuracy is the one-process accuracy exactly, and the loss agrees to float rounding."""
    env = cli_env(1, PYTHONPATH=path_with_tests())  # the second process, which Lightning starts, imports probes too
    common = ("recipe=quickstart", "net=probes.TinyNet", "accelerator=cpu", "batch_size=32")
    run_cli("fit", *common, "epochs=1", "trainer.limit_train_batches=3", "test_after_fit=false", cwd=tmp_path, env=env)
    run = tmp_path / "runs" / "quickstart" / "version_0"
    found = {}
    for devices in (1, 2):
        before = set(run.glob("eval_*"))
        ckpt = run / "checkpoints" / "last.ckpt"
        run_cli("validate", *common, f"devices={devices}", f"ckpt={ckpt}", cwd=tmp_path, env=env)
        (new,) = set(run.glob("eval_*")) - before
        (row,) = metrics_rows(new)
        found[devices] = float(row["val_acc"]), float(row["val_loss"])
    assert found[2][0] == found[1][0] and found[2][1] == pytest.approx(found[1][1], rel=1e-6), found


def test_the_xla_accelerator_gives_lightning_its_nvml_check_back_at_teardown(monkeypatch):
    from xla_train.runtime.torch_xla.accelerators import PJRTAccelerator

    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")  # on its own, not left over from another test (pytest -n 2)
    accelerator = PJRTAccelerator()
    accelerator.setup_device(torch.device("xla", 0))
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in os.environ
    accelerator.teardown()
    assert os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"


def test_a_jax_checkpoint_is_the_same_file_on_either_runtime(xla_runs, cifar_root, tmp_path):
    """Trained on JAX: its best checkpoint tests and predicts the held-out split on torch_xla and on JAX alike."""
    require("torch_xla")  # a [jax] environment has no torch_xla to compare with
    run, _ = xla_runs("jax")
    ckpt = next(run.glob("checkpoints/best-*.ckpt"))
    data = [f"data_dir={cifar_root}", "download=false"]
    lines = {}
    for runtime in ("torch_xla", "jax"):
        out = run_cli("predict", f"ckpt={ckpt}", "split=test", runtime_key(runtime), cwd=tmp_path).stdout
        lines[runtime] = next(line for line in out.splitlines() if line.startswith("accuracy "))
        tested = run_cli("test", "recipe=cifar10", *data, f"ckpt={ckpt}", runtime_key(runtime), cwd=tmp_path).stdout
        lines[f"test {runtime}"] = next(line for line in tested.splitlines() if line.startswith("test: "))
    assert lines["torch_xla"] == lines["jax"], lines
    assert lines["test torch_xla"] == lines["test jax"], lines


EIGHT = (  # a short fit of a tiny BatchNorm net on 8 XLA devices
    "recipe=quickstart",
    "model.net.class_path=probes.TinyNet",
    "epochs=2",
    "predict_samples=2",
)


@pytest.fixture(scope="module")
def eight_device_fits(tmp_path_factory):
    """EIGHT on `runtime`, run once for the module: (its folder, its process). Several tests read one run."""
    done = {}

    def fit(runtime: str):
        if runtime not in done:
            work = tmp_path_factory.mktemp(f"eight_{runtime}")
            done[runtime] = work, run_cli(*EIGHT, runtime_key(runtime), "devices=8", cwd=work, devices=8)
        return done[runtime]

    return fit


def test_a_fit_on_eight_devices_compiles_once_per_phase_and_its_checkpoint_predicts_on_the_cpu(
    eight_device_fits, runtime
):
    """One device: test_xla_fit_compiles_in_epoch_one_and_never_again, above."""
    tmp_path, proc = eight_device_fits(runtime)
    out = proc.stdout
    assert "(accelerator xla, 8 device(s))" in out, out[-2000:]
    assert "compiled graphs by phase: train 1 (" in out and ", validate 1 (" in out, out
    assert f"runtime: {runtime}\n" in out and "compile cache:" not in out  # auto keeps none on the CPU
    assert "held-out test accuracy" in out and "CPU predictions from" in out, out
    ckpt = next(tmp_path.glob("runs/quickstart/version_0/checkpoints/best-*.ckpt"))
    state = torch.load(ckpt, weights_only=True)
    tracked = state["state_dict"]["net.body.0.num_batches_tracked"]
    assert tracked.dtype == torch.int64 and int(tracked) > 0  # as torch keeps it, counted on the devices
    assert state["state_dict"]["net.body.0.running_var"].sub(1).abs().max() > 1e-3  # the statistics moved
    assert all(t.device.type == "cpu" for t in state["state_dict"].values())


@pytest.mark.parametrize("devices", [1, 8])
def test_the_held_out_test_accuracy_counts_each_test_sample_once(
    xla_runs, eight_device_fits, runtime, devices, cifar_root, relaxed_cifar_checks
):
    """The test split fills no last batch (80 CIFAR images at 32 on one device, 360 digits at 8 x 32 on eight), and
    the padding that keeps the program's shapes fixed counts nowhere: the accuracy the fit reports is its best
    checkpoint's net on the CPU over the split, sample for sample."""
    from probes import TinyNet
    from xla_train import Run, load_for_inference
    from xla_train.data.cifar10 import CIFAR10DataModule
    from xla_train.data.digits import DigitsDataModule

    if devices == 1:
        run, data, net = xla_runs(runtime)[0], CIFAR10DataModule(data_dir=str(cifar_root), download=False), None
    else:
        run, data, net = (
            eight_device_fits(runtime)[0] / "runs" / "quickstart" / "version_0",
            DigitsDataModule(),
            TinyNet,
        )
    x, y = data.arrays("test")
    assert len(x) % (32 * devices), len(x)  # a last batch that padding fills
    predictor = load_for_inference(next(run.glob("checkpoints/best-*.ckpt")), net=net)
    right = int((predictor.probabilities(x).argmax(1).numpy() == y).sum())
    assert 0 < right < len(x), right
    assert Run.from_folder(run).test_metrics["test_acc"] == pytest.approx(right / len(x), abs=1e-6), (right, len(x))


def test_data_held_on_eight_devices_trains_as_streamed_data_does(eight_device_fits, tmp_path, runtime):
    """The splits uploaded once and passed to every program, the epoch's order with them: two epochs (two orders)
    end at the weights the streamed run ends at, batch for batch; the held run is the fit above (on_device=auto).
    One device: test_steps_per_execution.py::test_device_resident_data_trains_exactly_as_streamed_batches."""
    weights = {}
    for on in ("true", "false"):
        if on == "true":
            work, proc = eight_device_fits(runtime)
        else:
            work = tmp_path / on
            work.mkdir()
            proc = run_cli(
                *EIGHT, runtime_key(runtime), "on_device=false", "devices=8", "predict_samples=0",
                "test_after_fit=false", cwd=work, devices=8,
            )  # fmt: skip
        out = proc.stdout
        assert ("data: on the device (" in out) == (on == "true"), out
        last = torch.load(next(work.glob("runs/quickstart/version_0/checkpoints/last.ckpt")), weights_only=True)
        weights[on] = last["state_dict"]
    assert weights["true"].keys() == weights["false"].keys()
    for name, t in weights["true"].items():
        assert torch.allclose(t.float(), weights["false"][name].float(), atol=1e-6), name
