"""Every reach behind a public API (Lightning, torch_xla, torch, jsonargparse, Python's sys), and every process-wide patch.

Each entry says what it relies on, and was read in the installed sources of:
lightning 2.6.6, torch_xla 2.9.0, torch 2.9.0-2.12.1, jsonargparse 4.53.0
(pyproject.toml caps each; torch's entries in each minor release [jax] allows: 2.9.0, 2.10.0, 2.11.0, 2.12.1,
the same code in each). On an upgrade this file is the audit: check each entry against the new source. The patches
section lists each process-wide patch with its install and its undo. tests/test_layout_source.py keeps private names
out of the rest of xla_train (docs/layout.md).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys

# Lightning is imported inside what needs it: the device probes below serve `xla_train devices`, which should not
# wait for Lightning's import (and torchmetrics', which Lightning's pulls in), a good part of a process's start.

# --- Lightning ------------------------------------------------------------------------------------------------


class CheckpointReadingCLI:
    """For LightningCLI subclasses (listed before it): a public hook before it reads a checkpoint's hyperparameters.

    LightningCLI._parse_ckpt_path (called from __init__, before any class is built) opens
    `ckpt_path` itself; `read_checkpoint_first(path)` runs before it, so that a truncated,
    foreign or malicious file is refused by xla_train's safe reader with one line.
    """

    def read_checkpoint_first(self, path: str) -> None:
        """Called with the subcommand's ckpt_path, if one is given."""

    def _parse_ckpt_path(self) -> None:
        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        if path:
            self.read_checkpoint_first(path)
        super()._parse_ckpt_path()


def request_stop_after_step(trainer) -> None:
    """What Lightning's own SIGTERM handler sets: the fit loop raises SIGTERMException after the current step."""
    trainer._signal_connector.received_sigterm = True


def init_single_device_xla_strategy(strategy, device, accelerator, precision_plugin) -> None:
    """SingleDeviceXLAStrategy.__init__ (lightning 2.6.6) without its own body, which only converts the device
    through xm.xla_device() (deprecated in torch_xla 2.9, a warning per strategy) and sets `debug`: the base
    SingleDeviceStrategy.__init__ with the device as given."""
    from lightning.pytorch.strategies import SingleDeviceStrategy

    SingleDeviceStrategy.__init__(
        strategy, accelerator=accelerator, device=device, checkpoint_io=None, precision_plugin=precision_plugin
    )
    strategy.debug = False


def counts_as_lightning_xla_strategy(cls: type) -> type:
    """A class decorator for a ParallelStrategy of xla_train's on XLA devices (SPMD's), which Lightning's accelerator
    connector must take for one of its XLA strategies: by isinstance, it refuses an XLAAccelerator beside any strategy
    but SingleDeviceXLAStrategy or XLAStrategy (_lazy_init_strategy), and gives those two XLAPrecision
    (_check_and_init_precision). Registered as a virtual subclass of SingleDeviceXLAStrategy (abc's register), the
    class answers those checks and inherits none of that strategy's code. abc's subclass walk makes it count as a
    SingleDeviceStrategy too; lightning.pytorch 2.6.6 asks that of no strategy, and those two checks are its only
    isinstance tests of SingleDeviceXLAStrategy (read in its source)."""
    from lightning.pytorch.strategies import SingleDeviceXLAStrategy

    return SingleDeviceXLAStrategy.register(cls)


class OwnCheckpointIO:
    """For XLA strategies: Lightning's SingleDeviceXLAStrategy.checkpoint_io asserts an XLACheckpointIO;
    this one keeps whatever plugin is set in Strategy._checkpoint_io, else `default_checkpoint_io()`."""

    def default_checkpoint_io(self):
        raise NotImplementedError

    @property
    def checkpoint_io(self):
        if self._checkpoint_io is None:
            self._checkpoint_io = self.default_checkpoint_io()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io) -> None:
        self._checkpoint_io = io


def restarted_mid_epoch(trainer) -> bool:
    """_FitLoop.restarted_mid_epoch: this fit resumed from a checkpoint written inside an epoch."""
    return trainer.fit_loop.restarted_mid_epoch


def batches_done(trainer) -> int:
    """Training batches finished in the current epoch, as Lightning counts them for a checkpoint (a checkpoint
    written in on_train_batch_end already counts its batch)."""
    return trainer.fit_loop.epoch_loop.batch_progress.current.processed


def setup_train_data(trainer) -> None:
    """Make trainer.num_training_batches known before fit's data setup (configure_optimizers runs first)."""
    if trainer.train_dataloader is None:
        trainer.fit_loop.setup_data()


@functools.cache
def _results_launcher() -> type:
    from lightning.pytorch.strategies.launchers.xla import _XLALauncher

    class _ResultsLauncher(_XLALauncher):
        """Lightning's _XLALauncher (lightning/pytorch/strategies/launchers/xla.py) sends only the weights, the best
        checkpoint's path, the trainer state and callback_metrics from worker 0 to the parent. This one also sends
        its strategy's `worker_results(trainer)` (a picklable dict, made in worker 0) and hands it to the strategy's
        `restore_worker_results(trainer, results)` in the parent. get_extra_results and update_main_process_results
        are _MultiProcessingLauncher's own extension points for this."""

        def get_extra_results(self, trainer) -> dict:
            return {**super().get_extra_results(trainer), "xla_train": self._strategy.worker_results(trainer)}

        def update_main_process_results(self, trainer, extra: dict) -> None:
            super().update_main_process_results(trainer, extra)
            self._strategy.restore_worker_results(trainer, extra["xla_train"])

        def _recover_results_in_main_process(self, worker_output, trainer) -> None:
            """The worker's last weights come as a bare state_dict file (`.temp.ckpt`), which xla_train's checkpoint
            reader refuses (no xla_train checkpoint); read it here, weights-only, and let Lightning do the rest."""
            import torch

            path = worker_output.weights_path
            if path is not None:
                trainer.lightning_module.load_state_dict(
                    torch.load(path, map_location="cpu", weights_only=True), strict=False
                )  # as Lightning does: the worker may differ
                os.remove(path)
                worker_output = worker_output._replace(weights_path=None)
            super()._recover_results_in_main_process(worker_output, trainer)

    _ResultsLauncher.__qualname__ = "_ResultsLauncher"  # pickled by name, with the Trainer, to xla_mp's workers
    return _ResultsLauncher


def __getattr__(name: str):
    """compat._ResultsLauncher, made on first use: a worker unpickling a strategy asks for it by name."""
    if name == "_ResultsLauncher":
        return _results_launcher()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ReturningXLALauncher:
    """For XLAStrategy subclasses: XLAStrategy._configure_launcher installs the launcher; this one returns more."""

    def _configure_launcher(self) -> None:
        self._launcher = _results_launcher()(self)


def logger_state(logger) -> dict:
    """What a logger has settled in a worker process: its version (CSVLogger and TensorBoardLogger choose it
    by listing the runs folder on first use, xla_train's run loggers by claiming one) and its `_experiment` where that pickles (CSVLogger's
    _ExperimentWriter; a new one would delete the metrics.csv the worker wrote, _check_log_dir_exists)."""
    import pickle

    experiment = getattr(logger, "_experiment", None)
    try:
        pickle.dumps(experiment)
    except Exception:  # TensorBoard's SummaryWriter: a new one in the next process adds an event file
        experiment = None
    return {"version": logger.version, "experiment": experiment}


def set_logger_state(logger, state: dict) -> None:
    if state["version"] is not None:
        if hasattr(logger, "adopt_version"):  # config/run_loggers.py's claimed folders
            logger.adopt_version(state["version"])
        else:
            logger._version = state["version"]
    if state["experiment"] is not None:
        logger._experiment = state["experiment"]


# The two lines Lightning logs as a test or validation loads its checkpoint (trainer/connectors/checkpoint_connector.py,
# resume_start and _restore_modules_and_callbacks), through rank_zero_info and so the logger below (utilities/
# rank_zero.py sets it as lightning_utilities' rank-zero log).
CHECKPOINT_RESTORE_LINES = (
    "Restoring states from the checkpoint path at ",
    "Loaded model weights from the checkpoint at ",
)
RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"


class _DropRestoreLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(CHECKPOINT_RESTORE_LINES)


@contextlib.contextmanager
def without_checkpoint_restore_lines():
    """Lightning's checkpoint-loading lines left out for the block, and only they: after fit the run report already
    names the best checkpoint that test_after_fit evaluates, and prints its path with the test's result."""
    log, drop = logging.getLogger(RANK_ZERO_LOGGER), _DropRestoreLines()
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


# --- jsonargparse ---------------------------------------------------------------------------------------------


def set_type(parser, dest_prefix: str, typehint) -> None:
    """Give the parser's actions whose dest starts with `dest_prefix` another type.

    The Trainer annotates limit_*_batches Optional[Union[int, float]], but typing caches unions up to argument
    order, so jsonargparse can be handed Union[float, int, None], try float first and read 1 as 1.0.
    """
    for action in parser._actions:
        if action.dest.startswith(dest_prefix) and hasattr(action, "_typehint"):
            action._typehint = typehint


# --- torch (torch_xla's private uses: runtime/torch_xla/compat.py) --------------------------------------


def mark_optimizer_stepped(optimizer) -> None:
    """What torch.optim.Optimizer.step sets for the LR scheduler's order check (lr_scheduler.py, `_opt_called`,
    torch 2.9-2.12): an optimizer whose update runs inside an XLA program is stepped without its step() being called."""
    optimizer._opt_called = True


# --- process-wide patches: each with its install and its undo ------------------------------------------------


def swap_forward(module, classes: tuple, forward) -> dict:
    """Install: every layer of `module` that is an instance of `classes` gets, as its class, a subclass of its own
    class whose forward is `forward`; its state dict keys, parameters and isinstance checks stay as they were
    (runtime/torch_xla/spmd.py's reduction BatchNorm). A layer whose class has a forward of its own (a user's subclass) keeps
    it: `forward` goes beneath it, in place of the listed class's, so that its `super().forward()` runs `forward`.
    Returns {layer: its own class}. Undo: restore_classes()."""
    made = _SWAPPED.setdefault(forward, {})
    stock = {c.forward for c in classes}
    changed = {}
    for layer in module.modules():
        cls = type(layer)
        if isinstance(layer, classes) and cls not in made.values():
            if cls not in made:
                made[cls] = _with_forward(cls, classes, stock, forward)
            layer.__class__ = made[cls]
            changed[layer] = cls
    return changed


def _with_forward(cls, classes: tuple, stock: set, forward) -> type:
    if cls.forward in stock:
        return type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__})
    listed = next(c for c in cls.__mro__ if c in classes)
    beneath = type(listed.__name__, (listed,), {"forward": forward, "__module__": listed.__module__})
    # C3 order: cls and the classes between it and `listed`, then `beneath`, then `listed`
    return type(cls.__name__, (cls, beneath), {"__module__": cls.__module__})


_SWAPPED: dict = {}  # forward -> {class: its subclass with that forward}, made once each


def restore_classes(changed: dict) -> None:
    """Undo swap_forward()."""
    for layer, cls in changed.items():
        layer.__class__ = cls


def set_rank_zero_only(rank: int) -> int:
    """Install: the process-wide rank of Lightning's and Fabric's `rank_zero_only` (a module global that gates their
    loggers and messages), for a pod host that Lightning counts as rank 0 of 1 (runtime/torch_xla/spmd.py). Returns the
    previous rank; undo: set_rank_zero_only(previous)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only as fabric_rank_zero_only
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    previous = getattr(rank_zero_only, "rank", 0)
    rank_zero_only.rank = fabric_rank_zero_only.rank = rank
    return previous


def channels_last_inputs(net, hook) -> None:
    """Install: the user's net in channels_last memory format, with a forward pre-hook that converts its inputs
    (runtime/eager/fast_path.py); the hook's handle kept on the net as its tag, so that a second setup adds no second
    hook. Undo: undo_channels_last_inputs(net)."""
    import torch

    if getattr(net, "_xla_train_channels_last", None) is not None:
        return
    net.to(memory_format=torch.channels_last)
    net._xla_train_channels_last = net.register_forward_pre_hook(hook)


def undo_channels_last_inputs(net) -> None:
    import torch

    handle = net.__dict__.pop("_xla_train_channels_last", None)
    if handle is not None:
        handle.remove()
        net.to(memory_format=torch.contiguous_format)


_INDUCTOR_CALLBACKS: tuple | None = None  # (start, end, [count, seconds, start of the open compilation])


def inductor_compile_clock():
    """Install: torch._dynamo.callback's on_compile_start/on_compile_end (torch 2.9-2.12) bracket each compilation,
    nested ones counted once: a frame that Dynamo traces and inductor compiles, and the backward graph that
    AOTAutograd compiles lazily at the first backward. Returns a function giving (compilations, seconds) so far;
    installed once per process however often it is asked, and again after torch._dynamo.reset(), which
    clears every compile callback. Undo: untime_inductor_compiles()."""
    global _INDUCTOR_CALLBACKS
    from torch._dynamo.callback import callback_handler, on_compile_end, on_compile_start

    if _INDUCTOR_CALLBACKS is None:
        import time

        totals = [0, 0.0, 0.0]

        def start(_args) -> None:
            totals[2] = time.perf_counter()

        def end(_args) -> None:
            totals[0] += 1
            totals[1] += time.perf_counter() - totals[2]

        _INDUCTOR_CALLBACKS = (start, end, totals)
    start, end, totals = _INDUCTOR_CALLBACKS
    if start not in callback_handler.start_callbacks:
        on_compile_start(start)
        on_compile_end(end)
    return lambda: (totals[0], totals[1])


def untime_inductor_compiles() -> None:
    """Undo inductor_compile_clock()."""
    global _INDUCTOR_CALLBACKS
    if _INDUCTOR_CALLBACKS is not None:
        from torch._dynamo.callback import callback_handler

        start, end, _ = _INDUCTOR_CALLBACKS
        if start in callback_handler.start_callbacks:  # torch._dynamo.reset() may have cleared them already
            callback_handler.remove_start_callback(start)
            callback_handler.remove_end_callback(end)
        _INDUCTOR_CALLBACKS = None


_LIGHTNING_TPU_PROBES: dict | None = None


def no_tpu_for_lightning(chips: int) -> None:
    """Install, where the PCI bus has no TPU chip (`chips`, runtime/probe.py's count): Lightning's XLAAccelerator.is_available and auto_device_count
    (lightning/fabric/accelerators/xla.py, 2.6.6; lru-cached static methods) answer 0 without asking torch_xla.
    Lightning asks them for every Trainer (its device banner, setup.py _log_device_info); torch_xla's
    num_available_devices multiplies the chips (0) by the cores per chip, for which it asks the TPU metadata
    server: a network call on every run, and with TPU_SKIP_MDS_QUERY set (importing JAX or Keras sets it) a
    TypeError Lightning does not catch, so no Trainer could be built. Undo: lightning_tpu_probes_back()."""
    global _LIGHTNING_TPU_PROBES
    from lightning.fabric.accelerators.xla import XLAAccelerator

    if _LIGHTNING_TPU_PROBES is None and chips == 0:
        _LIGHTNING_TPU_PROBES = {n: XLAAccelerator.__dict__[n] for n in ("is_available", "auto_device_count")}
        XLAAccelerator.is_available = staticmethod(lambda: False)
        XLAAccelerator.auto_device_count = staticmethod(lambda: 0)


def lightning_tpu_probes_back() -> None:
    """Undo no_tpu_for_lightning()."""
    global _LIGHTNING_TPU_PROBES
    if _LIGHTNING_TPU_PROBES is not None:
        from lightning.fabric.accelerators.xla import XLAAccelerator

        for name, probe in _LIGHTNING_TPU_PROBES.items():
            setattr(XLAAccelerator, name, probe)
        _LIGHTNING_TPU_PROBES = None


_TORCH_XLA_GRU = None


def keep_torch_gru() -> None:
    """Install: torch.nn.GRU back to torch's own class where importing torch_xla replaced it with torch_xla's scan
    GRU (torch_xla/_patched_functions.py, _apply_patches), which runs on XLA tensors only: an nn.GRU built after a
    fit on XLA (a notebook's next cell, a CPU run, load_for_inference) would fail on the CPU. Every nn.GRU still
    runs as a loop on XLA: runtime/layers/scan_rnn.py swaps it in on the device. Nothing happens before torch_xla is
    imported."""
    global _TORCH_XLA_GRU
    from torch import nn
    from torch.nn.modules import rnn

    if nn.GRU is not rnn.GRU and getattr(nn.GRU, "_orig", None) is rnn.GRU:
        _TORCH_XLA_GRU, nn.GRU = nn.GRU, rnn.GRU


def unkeep_torch_gru() -> None:
    """Undo keep_torch_gru(): torch_xla's GRU in torch.nn.GRU again."""
    global _TORCH_XLA_GRU
    if _TORCH_XLA_GRU is not None:
        from torch import nn

        nn.GRU, _TORCH_XLA_GRU = _TORCH_XLA_GRU, None


# --- torch, Python --------------------------------------------------------------------------------------------


def caller_site(depth: int = 2) -> str:
    """file:line of the caller's caller, naming a call site that every host must reach in the same order."""
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


@functools.cache
def packing_ops() -> tuple:
    """(pack, pad, rnns): the ops torch/nn/utils/rnn.py's pack_padded_sequence and pad_packed_sequence hand their work
    to, torch._VF._pack_padded_sequence(input, lengths, batch_first) -> (data, batch_sizes) and
    torch._VF._pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length) -> (padded, lengths),
    and those nn.LSTM's, nn.GRU's and nn.RNN's forwards run a PackedSequence with (torch._VF.lstm, gru, rnn_tanh,
    rnn_relu, batch_sizes among their arguments), as a torch function mode is handed them (torch 2.9.0-2.12.1)."""
    import torch

    vf = torch._VF
    return vf._pack_padded_sequence, vf._pad_packed_sequence, (vf.lstm, vf.gru, vf.rnn_tanh, vf.rnn_relu)


def tensor_version(tensor) -> int:
    """How many in-place changes a tensor has had: autograd's own counter (Tensor._version), which every in-place
    op, on any device, bumps; torch's autograd reads it to refuse a backward through a changed tensor."""
    return tensor._version
