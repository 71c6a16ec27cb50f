"""compat.py's process-wide patches: each install can be undone, and installing twice changes nothing more."""

import torch
from torch import nn

from xla_train import compat

from helpers import SCRIPTS, run_paced


def test_channels_last_on_the_users_net_installs_once_and_undoes():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    calls = []

    def hook(module, args):
        calls.append(1)
        return (args[0].contiguous(memory_format=torch.channels_last),)

    compat.channels_last_inputs(net, hook)
    compat.channels_last_inputs(net, hook)  # a second setup: no second hook
    assert net[0].weight.is_contiguous(memory_format=torch.channels_last)
    net(torch.randn(2, 3, 8, 8))
    assert len(calls) == 1
    compat.undo_channels_last_inputs(net)
    net(torch.randn(2, 3, 8, 8))
    assert len(calls) == 1 and net[0].weight.is_contiguous() and "_xla_train_channels_last" not in net.__dict__


def test_the_rank_zero_only_rank_is_set_and_put_back():
    from lightning.fabric.utilities.rank_zero import rank_zero_only as fabric
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    previous = compat.set_rank_zero_only(3)
    try:
        assert rank_zero_only.rank == fabric.rank == 3
    finally:
        assert compat.set_rank_zero_only(previous) == 3
    assert rank_zero_only.rank == previous


def test_a_swapped_forward_keeps_the_state_and_undoes():
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    keys = list(net.state_dict())
    changed = compat.swap_forward(net, (nn.BatchNorm1d,), lambda self, x: x * 0)
    assert isinstance(net[1], nn.BatchNorm1d) and type(net[1]) is not nn.BatchNorm1d
    assert list(net.state_dict()) == keys and not net(torch.ones(3, 2)).any()
    compat.restore_classes(changed)
    assert type(net[1]) is nn.BatchNorm1d


def test_the_inductor_compile_clock_installs_once_counts_each_compilation_and_undoes():
    from torch._dynamo.callback import CallbackArgs, CallbackTrigger, callback_handler

    args = CallbackArgs(CallbackTrigger.DYNAMO, "test")
    before = (len(callback_handler.start_callbacks), len(callback_handler.end_callbacks))
    compat.untime_inductor_compiles()  # a clean start, whatever ran before in this process
    clock = compat.inductor_compile_clock()
    assert compat.inductor_compile_clock()() == clock() == (0, 0.0)  # asked twice, installed once
    callback_handler.run_start_callbacks(args)
    callback_handler.run_end_callbacks(args)
    count, seconds = clock()
    assert count == 1 and seconds >= 0
    torch._dynamo.reset()  # clears every compile callback: the clock, asked again, counts again
    clock = compat.inductor_compile_clock()
    callback_handler.run_start_callbacks(args)
    callback_handler.run_end_callbacks(args)
    assert clock()[0] == 2
    compat.untime_inductor_compiles()
    callback_handler.run_start_callbacks(args)
    callback_handler.run_end_callbacks(args)
    assert clock()[0] == 2  # no longer counting
    assert (len(callback_handler.start_callbacks), len(callback_handler.end_callbacks)) <= before


def test_a_gru_built_after_torch_xla_is_imported_runs_on_the_cpu_and_the_patch_undoes():
    import sys

    from helpers import cli_env

    proc = run_paced([sys.executable, str(SCRIPTS / "gru_after_xla.py")], 300, env=cli_env(1))
    assert proc.stdout.split() == ["False", "True", "False"], proc.stderr[-2000:]


def test_lightning_asks_no_tpu_metadata_where_the_bus_has_no_tpu_and_the_patch_undoes():
    from lightning.fabric.accelerators.xla import XLAAccelerator

    installed = compat._LIGHTNING_TPU_PROBES is not None  # an earlier run in this worker process installed it
    compat.lightning_tpu_probes_back()
    original = XLAAccelerator.__dict__["auto_device_count"]
    try:
        compat.no_tpu_for_lightning(0)
        compat.no_tpu_for_lightning(0)  # once only: the undo gives back Lightning's own
        assert XLAAccelerator.__dict__["auto_device_count"] is not original
        assert XLAAccelerator.is_available() is False and XLAAccelerator.auto_device_count() == 0
        compat.lightning_tpu_probes_back()
        assert XLAAccelerator.__dict__["auto_device_count"] is original
    finally:
        if installed:
            compat.no_tpu_for_lightning(0)


def test_torch_xlas_jax_lookups_answer_none_while_installed_and_the_undo_gives_them_back():
    """runtime/torch_xla/compat.py's no_jax_for_torch_xla: while installed, torch_xla's profiler and sharding modules
    find no jax (so a torch_xla run never imports it: test_registry.py's fit shows it); the undo restores both."""
    import importlib

    from xla_train.runtime.torch_xla import compat as xla_compat

    modules = [importlib.import_module(n) for n in xla_compat._NO_JAX_MODULES]
    installed = xla_compat._JAX_LOOKUPS is not None  # a torch_xla run in this worker process installed it
    xla_compat.jax_for_torch_xla_back()
    originals = [m.maybe_get_jax for m in modules]
    try:
        xla_compat.no_jax_for_torch_xla()
        xla_compat.no_jax_for_torch_xla()  # once only: the undo gives back torch_xla's own
        assert [m.maybe_get_jax(log=False) for m in modules] == [None, None]
        xla_compat.jax_for_torch_xla_back()
        assert [m.maybe_get_jax for m in modules] == originals
    finally:
        if installed:
            xla_compat.no_jax_for_torch_xla()
