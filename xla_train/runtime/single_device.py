"""Lightning strategies for XLA devices.

The single-device strategy is Lightning's own, taking its device from the current torch_xla API and writing
checkpoints through the atomic writer. Batches go through torch_xla's MpDeviceLoader, which overlaps
host-to-device copies with compute and cuts the lazy graph after every batch, so each step is one cached graph.
Every nn.LSTM, nn.GRU and nn.RNN runs as scans (runtime/scan_rnn.py), whose compile time does not grow with the
sequence length, and with steps_per_execution > 1 K steps run as one program (runtime/steps_per_execution.py).
"""

from __future__ import annotations

import torch
from lightning.pytorch.strategies import SingleDeviceXLAStrategy
from typing_extensions import override

from xla_train import compat
from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.steps_per_execution import StepsPerExecution


class ModelOnXLA:
    """For any XLA strategy, how the model moves to the device.

    nn.LSTM, nn.GRU and nn.RNN would be unrolled over time on XLA, so scans run them as loops, with the same
    parameters, until teardown gives the model its nn modules back for the CPU. nn.Linear layers compute their
    weight gradient in the weight's own shape (runtime/linear_grad.py) until then too, and on XLA:CPU max pooling
    over tiling windows runs as a reduction (runtime/max_pool.py) and dropout hashes its mask (runtime/dropout.py).

    Its 0-dim buffers (BatchNorm's num_batches_tracked) go as data: `.to(device)` makes a scalar 0 or 1 an IR
    constant, which the loader's first sync then compiled as a graph of its own (no inputs, one output per
    buffer) at the first validation or training batch. So does the optimizer's state, made before the first step
    (runtime/optimizer_state.py).
    """

    @override
    def model_to_device(self) -> None:
        from xla_train.runtime.backend import xla
        from xla_train.runtime.dropout import use_hashed_dropout
        from xla_train.runtime.linear_grad import use_xla_linear
        from xla_train.runtime.max_pool import use_tiled_max_pool
        from xla_train.runtime.scan_rnn import use_scan_rnn

        scalars = [
            (m, name, b)
            for m in self.model.modules()
            for name, b in m.named_buffers(recurse=False)
            if b.dim() == 0 and b.device.type == "cpu"
        ]
        use_scan_rnn(self.model)
        self._swapped = use_xla_linear(self.model)  # {layer: its own class}, for teardown
        if xla().platform() == "CPU":  # a TPU has select-and-scatter and a random-bit generator of its own
            self._swapped.update(use_tiled_max_pool(self.model))
            self._swapped.update(use_hashed_dropout(self.model))
        super().model_to_device()
        if scalars:
            import torch_xla.core.xla_model as xm

            on_device = xm.send_cpu_data_to_device([b for _, _, b in scalars], self.root_device)
            for (module, name, _), tensor in zip(scalars, on_device):
                setattr(module, name, tensor)

    @override
    def on_train_start(self) -> None:
        """Adam's and SGD's state made as data before the first step (runtime/optimizer_state.py), after any resume
        has restored its own: otherwise the first step compiles a program that no later step runs."""
        super().on_train_start()
        import torch_xla.core.xla_model as xm

        from xla_train.runtime.optimizer_state import prime_optimizer_state

        for optimizer in self.optimizers:
            prime_optimizer_state(optimizer, lambda ts: xm.send_cpu_data_to_device(ts, self.root_device))

    @override
    def teardown(self) -> None:
        super().teardown()  # moves the model back to the CPU
        from xla_train.runtime.scan_rnn import restore_rnn

        restore_rnn(self.model)  # ...where the nn modules, not the scans, run them
        compat.restore_classes(getattr(self, "_swapped", {}))
        self._swapped = {}


class XLASingleDeviceStrategy(StepsPerExecution, ModelOnXLA, compat.OwnCheckpointIO, SingleDeviceXLAStrategy):
    strategy_name = "xla_single"

    def __init__(self, index: int = 0, accelerator=None, precision_plugin=None):
        import torch_xla

        compat.init_single_device_xla_strategy(self, torch_xla.device(index), accelerator, precision_plugin)

    def default_checkpoint_io(self) -> AtomicCheckpointIO:
        return AtomicCheckpointIO()

    @override
    def process_dataloader(self, dataloader):
        return device_loader(dataloader, self.root_device)

    def rows_to_device(self, rows: torch.Tensor) -> torch.Tensor:
        """A batch-like host tensor, placed as a loaded batch is (data/batching.py, the epoch's order)."""
        return rows.to(self.root_device)


def device_loader(dataloader, device, **kwargs):
    """torch_xla's MpDeviceLoader, made to behave like the DataLoader it wraps in two ways Lightning relies on.

    It shows the wrapped loader's sampler: Lightning reshuffles each epoch by
    calling set_epoch on `loader.sampler`, which a bare MpDeviceLoader lacks, so
    every epoch would replay the first epoch's order.

    It is lazy: a DataLoader without workers reads its sampler only at the first
    batch, but MpDeviceLoader starts threads in `iter()` that read it at once.
    Lightning calls `iter()` before `set_epoch()` when a run resumes
    (FitLoop.setup_data runs first), so an eager prefetch would read the previous
    epoch's order and a resumed XLA run would train on the wrong batches (a
    loader with workers reads ahead at `iter()` too: BatchSampler.resume_at puts
    the sampler at the resumed epoch at once).

    It starts the wrapped loader's iterator where Lightning starts a DataLoader's, in the training thread at
    `iter()`: a DataLoader's iterator draws its base seed from torch's global RNG as it starts, so started in
    MpDeviceLoader's thread at the first batch, a resumed run drew it after RngState had restored torch's RNG
    (one draw more than the uninterrupted run, whose draw came before its checkpoint), and every later draw
    from torch's RNG differed.

    It fails loudly: MpDeviceLoader's thread reads the wrapped loader, and an
    error there ends its queue as if the epoch were over (ParallelLoader's
    _loader_worker closes it in a `finally`), so a loader that raised would
    leave a run trained on the batches before the error, reporting success. The
    error is kept and raised here, in the training thread.
    """
    from torch_xla.distributed.parallel_loader import MpDeviceLoader

    if isinstance(dataloader, MpDeviceLoader):
        return dataloader
    source = _Recorded(dataloader)

    class DeviceLoader(MpDeviceLoader):
        sampler = property(lambda self: getattr(dataloader, "sampler", None))
        batch_sampler = property(lambda self: getattr(dataloader, "batch_sampler", None))

        @override
        def __iter__(self):
            start = super().__iter__
            source.start()

            def batches():  # a generator: nothing starts until the first next()
                source.error = None
                yield from start()
                if source.error is not None:
                    raise source.error

            return batches()

    return DeviceLoader(source, device, **kwargs)


class _Recorded:
    """A loader whose iteration keeps the error it ended with (it is read in another thread)."""

    def __init__(self, loader) -> None:
        self.loader, self.error = loader, None
        self._started = None

    def start(self) -> None:
        """Start the loader's iterator now, in this thread; the next iteration reads from it."""
        self._started = iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):
        if name == "loader":  # not yet set (unpickling)
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self):
        started, self._started = self._started, None
        try:
            yield from started if started is not None else self.loader
        except Exception as e:
            self.error = e
            raise
