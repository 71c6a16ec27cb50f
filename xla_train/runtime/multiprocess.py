"""strategy=xla_mp: Lightning's XLAStrategy, one process per TPU core, for TPU users who want it.

SPMD (spmd.py) is the default and torch_xla's recommended path. This one is
refused off a TPU (plan.py): on XLA:CPU its collectives cannot run
(pytorch/xla#5005).
"""
from __future__ import annotations

from lightning.pytorch.strategies import XLAStrategy
from typing_extensions import override

from xla_train import compat
from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.strategies import ScanLSTMOnXLA, device_loader


class XLAMultiProcessStrategy(ScanLSTMOnXLA, compat.OwnCheckpointIO, XLAStrategy):
    """Lightning's XLAStrategy with the atomic checkpoint writer, the device loader that shows Lightning the
    sampler to reshuffle, and the scan LSTM."""

    strategy_name = "xla_mp"

    def default_checkpoint_io(self) -> AtomicCheckpointIO:
        return AtomicCheckpointIO()

    @override
    def process_dataloader(self, dataloader):
        return device_loader(dataloader, self.root_device)  # so that Lightning can reshuffle each epoch
