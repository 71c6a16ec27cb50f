"""Lightning's checkpoint plugin, pointed at xla_train's atomic writer and safe reader.

Used by every strategy, so CPU, GPU and XLA runs write the same file format. A runtime whose tensors live on a
device hands in how to bring them to the host at once (`to_host`: torch_xla's one transfer for all of them).
"""

from __future__ import annotations

from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

from xla_train.checkpoint import atomic_save, safe_load, tensors_in


class AtomicCheckpointIO(TorchCheckpointIO):
    def __init__(self, device_type: str = "", to_host=None) -> None:
        super().__init__()
        self.device_type, self.to_host = device_type, to_host

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any = None) -> None:
        """The XLA tensors come to the host in one transfer: `.cpu()` on each of the weights and the
        optimizer's state is a transfer each, and on a TPU a round trip to the device each (docs/results.md,
        "Start-up and exit")."""
        on_device = [t for t in tensors_in(checkpoint) if t.device.type == self.device_type] if self.to_host else []
        moved = dict(zip(map(id, on_device), self.to_host(on_device))) if on_device else None
        atomic_save(checkpoint, path, moved)

    @override
    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return safe_load(path)
