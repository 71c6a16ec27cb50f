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
        return device_loader(dataloader, self.root_device)


def device_loader(dataloader, device, **kwargs):
    """torch_xla's MpDeviceLoader, showing Lightning the wrapped loader's sampler.

    Lightning reshuffles each epoch by calling set_epoch on `loader.sampler`; a
    bare MpDeviceLoader has no such attribute, so every epoch would replay the
    first epoch's order and a resumed run could not find its place in it.
    """
    from torch_xla.distributed.parallel_loader import MpDeviceLoader

    if isinstance(dataloader, MpDeviceLoader):
        return dataloader

    class DeviceLoader(MpDeviceLoader):
        sampler = property(lambda self: getattr(self._loader, "sampler", None))
        batch_sampler = property(lambda self: getattr(self._loader, "batch_sampler", None))

    return DeviceLoader(dataloader, device, **kwargs)
