"""Lightning's checkpoint plugin, pointed at xla_train's atomic writer and safe reader.

Used by every strategy, so CPU, GPU and XLA runs write the same file format.
"""

from __future__ import annotations

from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

from xla_train.checkpoint import atomic_save, safe_load


class AtomicCheckpointIO(TorchCheckpointIO):
    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any = None) -> None:
        atomic_save(checkpoint, path)

    @override
    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return safe_load(path)
