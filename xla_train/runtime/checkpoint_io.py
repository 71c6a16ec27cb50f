"""Lightning's checkpoint plugin, pointed at xla_train's atomic writer and safe reader.

Used by every strategy, so CPU, GPU and XLA runs write the same file format.
"""

from __future__ import annotations

from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.checkpoint import atomic_save, safe_load, tensors_in


class AtomicCheckpointIO(TorchCheckpointIO):
    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any = None) -> None:
        """The XLA tensors come to the host in one transfer: `.cpu()` on each of the weights and the
        optimizer's state is a transfer each, and on a TPU a round trip to the device each (docs/results.md,
        "Start-up and exit")."""
        on_xla = [t for t in tensors_in(checkpoint) if t.device.type == "xla"]
        moved = dict(zip(map(id, on_xla), xla_compat.xla_to_cpu(on_xla))) if on_xla else None
        atomic_save(checkpoint, path, moved)

    @override
    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return safe_load(path)
