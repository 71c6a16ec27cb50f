"""Lightning strategies for XLA devices.

The single-device strategy is Lightning's own, with three changes: it takes the
device from the current torch_xla API, it writes checkpoints through the atomic
writer, and it feeds batches through torch_xla's MpDeviceLoader, which overlaps
host-to-device copies with compute and cuts the lazy graph after every batch
(training, validation and test alike), so each step is one cached graph.
"""
from __future__ import annotations

from lightning.pytorch.strategies import SingleDeviceStrategy, SingleDeviceXLAStrategy

from xla_train.checkpoint_io import AtomicCheckpointIO


class XLASingleDeviceStrategy(SingleDeviceXLAStrategy):
    strategy_name = "xla_single"

    def __init__(self, index: int = 0, accelerator=None, precision_plugin=None):
        import torch_xla

        SingleDeviceStrategy.__init__(self, accelerator=accelerator, device=torch_xla.device(index),
                                      checkpoint_io=None, precision_plugin=precision_plugin)
        self.debug = False

    @property
    def checkpoint_io(self) -> AtomicCheckpointIO:
        if self._checkpoint_io is None:
            self._checkpoint_io = AtomicCheckpointIO()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io) -> None:
        self._checkpoint_io = io

    def process_dataloader(self, dataloader):
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        if isinstance(dataloader, MpDeviceLoader):
            return dataloader
        return MpDeviceLoader(dataloader, self.root_device)
