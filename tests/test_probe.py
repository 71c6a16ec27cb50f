"""The PJRT device is decided once, before any default is chosen from it, whatever ran before and in any order.

A new user sets nothing: no PJRT_DEVICE, no CPU_NUM_DEVICES. The loop, K and the data path must then be chosen
for the device the runtime will really start on, not for an unset variable that a later step fills in.
"""

import os
import sys

import pytest

from helpers import run_paced
from xla_train.runtime import probe, registry
from xla_train.runtime.torch_xla.devices import pjrt_device
from xla_train.runtime.grouping import UNROLL_LONG_STEPS, UNROLLED_K, WHILE_K, auto_steps
from xla_train.runtime.torch_xla.backend import XLA
from xla_train.runtime.grouping import GroupingSettings, decide
from xla_train.runtime.plan import run_steps


@pytest.fixture
def new_user(monkeypatch):
    """Nothing set in the environment; the TPU probe answers `chips` (0: no TPU on the PCI bus)."""
    for key in [k for k in os.environ if k.startswith(("PJRT_", "CPU_NUM_DEVICES", "XLA_"))]:
        monkeypatch.delenv(key)

    def with_chips(chips: int):
        monkeypatch.setattr(probe, "tpu_chips", lambda root=None: chips)

    with_chips(0)
    return with_chips


def planned(accelerator="xla", loop="auto", setting="auto"):
    """(loop, K, note, pending) as torch_xla's plan decides them before the net and the run's length are known."""
    g = decide(GroupingSettings(setting, loop), host_platform=XLA.platform(accelerator) == "cpu")
    return g.loop, g.k, g.note, g.pending


def test_with_nothing_set_and_no_tpu_the_plan_is_xla_cpus(new_user):
    assert pjrt_device() == "CPU" and "PJRT_DEVICE" not in os.environ  # decided, and nothing written
    assert planned() == ("unroll", UNROLLED_K, f"{UNROLLED_K} (auto)", True)  # unrolled; the run's length decides K
    assert planned("tpu")[:3] == ("while", WHILE_K, f"{WHILE_K} (auto)")  # accelerator=tpu is a TPU's plan
    # a benchmark cell gets the answer, not the unset variable, and its devices= sets the CPU device count
    assert XLA.child_env({"CPU_NUM_DEVICES": "8", "HOME": "/h"}) == {"PJRT_DEVICE": "CPU", "HOME": "/h"}


def test_a_tpu_on_the_pci_bus_gets_the_while_loop(new_user):
    new_user(4)
    assert pjrt_device() == "TPU"
    assert planned() == ("while", WHILE_K, f"{WHILE_K} (auto)", False)


@pytest.mark.parametrize("setting, chips, device, loop", [("TPU", 0, "TPU", "while"), ("cpu", 4, "CPU", "unroll")])
def test_the_users_pjrt_device_wins_over_the_probe(new_user, monkeypatch, setting, chips, device, loop):
    new_user(chips)
    monkeypatch.setenv("PJRT_DEVICE", setting)
    assert pjrt_device() == device and planned()[0] == loop


def test_a_second_run_in_the_process_is_planned_alike(new_user):
    """configure_pjrt writes the answer it was planned from, so a notebook's second fit reads the same one."""
    from xla_train.runtime.torch_xla.devices import configure_pjrt

    first = planned()
    configure_pjrt("xla")
    assert os.environ["PJRT_DEVICE"] == "CPU"
    assert planned() == first


def test_auto_k_on_unrolled_steps_pays_back_its_compile_else_runs_one_step_a_program():
    """A While program does not grow with K; an unrolled one does, so K=8 only for a run long enough to repay it,
    and a shorter run one step a program, traced once (docs/results.md)."""
    k, note, pending = auto_steps("unroll", UNROLL_LONG_STEPS)
    assert (k, pending) == (UNROLLED_K, False) and "enough to pay back" in note and UNROLLED_K == 8
    k, note, pending = auto_steps("unroll", UNROLL_LONG_STEPS - 1)
    assert (k, pending) == (1, False) and note.endswith(
        "too few to pay back the longer compile of 8 unrolled steps; one step a program, traced once)"
    ), note
    assert auto_steps("unroll", float("inf"))[0] == UNROLLED_K
    assert auto_steps("while", 1)[:2] == (WHILE_K, f"{WHILE_K} (auto)")  # a While program does not grow with K
    # the run's length as the Trainer reads max_epochs and max_steps
    assert run_steps(40, 12, -1) == 480 and run_steps(40, 12, 100) == 100
    assert run_steps(40, None, -1) == 40_000 and run_steps(40, None, 16) == 16 and run_steps(40, -1, -1) == float("inf")


def test_torch_xla_imported_after_xla_train_picks_no_device_of_its_own():
    """Importing torch_xla first used to set PJRT_DEVICE as a side effect (its own default pick), which then read
    as the user's choice; xla_train's runtime package stops that, so import order changes nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "CPU_NUM_DEVICES", "XLA_"))}
    code = (
        "import os, xla_train.runtime.plan, torch_xla; from xla_train.runtime.probe import xla_platform; "
        "print(os.environ.get('PJRT_DEVICE'), xla_platform('xla'))"
    )
    out = run_paced([sys.executable, "-c", code], 120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "cpu"], out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize(
    "runtime, cuda, expected",
    [("auto", False, "cpu"), ("jax", False, "xla"), ("torch_xla", False, "xla")]
    + [("auto", True, "gpu"), ("jax", True, "gpu"), ("torch_xla", True, "xla")],
)
def test_accelerator_auto_with_a_runtime_named_trains_on_xla_never_eager(
    new_user, monkeypatch, runtime, cuda, expected
):
    """runtime=jax on a machine with no TPU or GPU asks for XLA on the CPU: it must not be dropped for eager
    PyTorch (devices=8 then became 8 DDP processes). torch_xla has no GPU build, so it takes XLA:CPU there."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert registry.resolve_accelerator("auto", runtime) == expected


@pytest.mark.parametrize(
    "accelerator, runtime, words",
    [("cpu", "jax", "accelerator=cpu is eager PyTorch"), ("cpu", "torch_xla", "use accelerator=xla")]
    + [("gpu", "torch_xla", "runtime=torch_xla has no GPU build")],
)
def test_a_runtime_that_cannot_run_the_accelerator_is_refused(accelerator, runtime, words):
    from xla_train.errors import ConfigError

    with pytest.raises(ConfigError, match=words):
        registry.resolve_accelerator(accelerator, runtime)
