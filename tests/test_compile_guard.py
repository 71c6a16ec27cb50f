"""After warm-up, a new XLA compilation is seen: a warning by default, an error in strict mode."""

import sys
from pathlib import Path


from helpers import cli_env, run_cli, run_paced, write_cifar10

PROBE = Path(__file__).with_name("guard_probe.py")


def probe(mode, change, progress_every=0):
    return run_paced(
        [sys.executable, str(PROBE), mode, "change" if change else "steady", str(progress_every)], 600, env=cli_env(1)
    )


def test_steady_shapes_compile_in_epoch_one_only_and_sync_only_for_the_progress_bar():
    proc = probe("strict", change=False, progress_every=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiles = eval(proc.stdout.split("per-epoch compiles: ")[1].splitlines()[0])
    assert compiles[0] > 0 and compiles[1:] == [0, 0], compiles
    # 3 steps an epoch, a live bar every 2 steps: one read of the running sums per epoch, and nothing else
    assert "live bar refreshes: 3" in proc.stdout
    assert "host syncs in training steps: [1, 1, 1]" in proc.stdout
    assert "WARNED" not in proc.stdout


def test_a_new_shape_after_warm_up_warns_with_the_shapes():
    proc = probe("warn", change=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = [ln for ln in proc.stdout.splitlines() if ln.startswith("WARNED")]
    assert warned and "during train after warm-up" in warned[0]
    assert "(16, 3, 32, 32)" in warned[0] and "(8, 3, 32, 32)" in warned[0]


def test_without_a_live_bar_training_steps_never_sync():
    proc = probe("off", change=True)
    assert proc.returncode == 0 and "WARNED" not in proc.stdout  # off: not even a warning
    assert "host syncs in training steps: [0, 0, 0]" in proc.stdout


def test_strict_guard_exits_3_through_the_real_cli_on_a_real_recompile(tmp_path):
    """No probe calls sys.exit here: the CLI's own error path turns the guard's error into the exit code."""
    proc = run_cli(
        "fit",
        "recipe=quickstart",
        "model.net.class_path=probes.TinyNet",
        "data.class_path=probes.ShapeShiftingDigits",
        "epochs=2",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=1",
        "predict_samples=0",
        "test_after_fit=false",
        "xla_guard=strict",
        "on_device=false",
        cwd=tmp_path,
        check=False,
    )  # streamed: the batch's shape is the images'

    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and len(err) >= 1, proc.stderr
    assert err[-1].startswith("xla_train: error: XLA compiled") and "during train after warm-up" in err[-1]
    assert "(16, 32, 32, 3)" in err[-1] and "xla_guard=strict" in err[-1], err[-1]  # uint8 NHWC, as stored


def test_a_loader_that_raises_mid_epoch_fails_the_run_on_xla(tmp_path):
    """torch_xla's MpDeviceLoader reads batches in a thread that ends the epoch quietly on an error; the run must
    fail with that error instead of reporting an epoch of two batches as done."""
    proc = run_cli(
        "fit",
        "recipe=quickstart",
        "model.net.class_path=probes.TinyNet",
        "data.class_path=probes.BreakingDigits",
        "epochs=1",
        "trainer.limit_val_batches=1",
        "predict_samples=0",
        "test_after_fit=false",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "ValueError: the loader broke at batch 2" in proc.stderr


def test_the_host_share_counts_a_compile_once_and_is_never_negative(tmp_path):
    """K=32 over an epoch of 40 steps: two executions, the first of them compiling inside its sync. The compile
    is inside the sync's seconds, so taking both out subtracted it twice and drove the epoch's host figure below
    zero; counted once, each epoch line's host share is at least 0 and below its step time."""
    import csv
    import re

    proc = run_cli(
        "fit",
        "recipe=cifar10_resnet",
        "model.net.class_path=probes.TinyNet",
        "accelerator=xla",
        "epochs=2",
        "batch_size=8",  # 320 images: 40 steps an epoch
        "steps_per_execution=32",
        "execution_loop=while",
        "trainer.limit_val_batches=1",
        "download=false",
        "test_after_fit=false",
        "val_fraction=0",
        f"data_dir={write_cifar10(tmp_path / 'data', per_batch=64)}",
        cwd=tmp_path,
    )
    lines = [ln for ln in proc.stdout.splitlines() if re.match(r"40/40 - ", ln)]
    assert len(lines) == 2, proc.stdout
    for line in lines:
        host, step = (float(re.search(p, line).group(1)) for p in (r"\(host (-?[\d.]+)ms\)", r"(\d+)ms/step"))
        assert 0 <= host <= step + 1, line
    with open(sorted(tmp_path.glob("runs/*/version_*/metrics.csv"))[-1]) as f:
        rows = [r for r in csv.DictReader(f) if r.get("xla_host_ms_per_step")]
    assert [int(r["xla_executions"]) for r in rows] == [2, 2]
    assert all(float(r["xla_host_ms_per_step"]) >= 0 for r in rows), rows
