"""The Lightning strategy of the torch_xla runtime: Lightning keeps the loop, the callbacks, the logging and the
checkpoints' timing; the engine (runtime/torch_xla/engine.py) places the model and runs K steps as one program.

The single-device strategy is Lightning's own, taking its device from the current torch_xla API; SPMD's (spmd.py) is
one of Lightning's parallel strategies. Each holds its engine, and what they share is TorchXlaSteps. Batches go
through torch_xla's MpDeviceLoader, which overlaps host-to-device copies with compute and cuts the lazy graph after
every batch, so each step is one cached graph. Every nn.LSTM, nn.GRU and nn.RNN runs as scans
(runtime/layers/scan_rnn.py), whose compile time does not grow with the sequence length.
"""

from __future__ import annotations

import torch
from lightning.pytorch.strategies import SingleDeviceXLAStrategy
from lightning.pytorch.utilities import find_shared_parameters, set_shared_parameters
from typing_extensions import override

from xla_train import compat
from xla_train.runtime.torch_xla.backend import XLA
from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.runtime.grouped_steps import GroupedSteps
from xla_train.runtime.torch_xla.engine import OneDevice, TorchXlaEngine


class TorchXlaSteps(GroupedSteps, compat.OwnCheckpointIO):
    """What both torch_xla strategies do with the engine they hold (`self.engine`, placed on one device or on SPMD's
    mesh), mixed in before the one Lightning strategy each is: the model and the optimizer placed by the engine, the
    device's generator seeded, the atomic checkpoint writer, batches through MpDeviceLoader."""

    engine: TorchXlaEngine

    @property
    def backend(self):
        return XLA

    def default_checkpoint_io(self) -> AtomicCheckpointIO:
        return AtomicCheckpointIO("xla", xla_compat.xla_to_cpu)

    @override
    def setup(self, trainer) -> None:
        super().setup(trainer)
        # the device's generator from the run's seed, as JAX's key is: torch.manual_seed leaves it where the process
        # left it (101 in a new one), so dropout's masks would not follow the seed; a resume restores it after this
        XLA.set_rng_state(self.root_device, torch.initial_seed())
        self.engine.bind(self.lightning_module, self.precision_plugin.train_step_context, self.execution_loop)

    @override
    def model_to_device(self) -> None:
        # tied parameters stay tied: moving a module to XLA makes new Parameters (as SingleDeviceXLAStrategy.setup
        # re-ties them around this call)
        shared = find_shared_parameters(self.model)
        self.engine.place_model(self.model, lambda: self.model.to(self.root_device), self.scan_chunk or 1)
        set_shared_parameters(self.model, shared)

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        self.engine.prime_optimizers(self.optimizers)

    @override
    def teardown(self) -> None:
        super().teardown()  # moves the model back to the CPU
        self.engine.restore_model(self.model)

    @override
    def process_dataloader(self, dataloader):
        return device_loader(dataloader, self.root_device)

    def rows_to_device(self, rows: torch.Tensor) -> torch.Tensor:
        """A batch-like host tensor, placed as a loaded batch is (data/batching.py, the epoch's order)."""
        return self.engine.placement.rows(rows)


class XLASingleDeviceStrategy(TorchXlaSteps, SingleDeviceXLAStrategy):
    strategy_name = "xla_single"

    def __init__(self, index: int = 0, accelerator=None, precision_plugin=None):
        import torch_xla

        compat.init_single_device_xla_strategy(self, torch_xla.device(index), accelerator, precision_plugin)
        self.engine = TorchXlaEngine(OneDevice(self.root_device))


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
