"""The layer rewrites an XLA runtime swaps into a net while it runs it, applied in one place for both runtimes.

What differs between the runtimes is handed in: the recurrence that scans an RNN layer (torch_xla's While loops or
JAX's lax.scan), its time steps per iteration, whether nn.Linear takes its weight gradient in the weight's shape
(torch_xla's lowering needs it), and whether the platform is XLA:CPU, where max pooling runs as a reduction and
dropout hashes its mask (runtime/layers/max_pool.py, dropout.py). `undo` gives the net its own modules back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from xla_train import compat
from xla_train.runtime.layers import dropout
from xla_train.runtime.layers.dropout import use_hashed_dropout
from xla_train.runtime.layers.linear_grad import use_xla_linear
from xla_train.runtime.layers.max_pool import use_tiled_max_pool
from xla_train.runtime.layers.scan_rnn import CHUNK, restore_rnn, use_scan_rnn


@dataclass(frozen=True)
class Rewrites:
    """What a runtime hands the rewrites."""

    recurrence: Callable  # one RNN layer and direction as the runtime scans it
    scan_chunk: int = CHUNK  # its time steps per loop iteration
    linear_grad: bool = False  # nn.Linear's weight gradient in the weight's shape
    host_platform: bool = False  # XLA:CPU: max pooling as a reduction, hashed dropout
    device_data: tuple[str, Callable] | None = None  # (device type, host tensor -> device data) for dropout's positions


def apply(module: nn.Module, rewrites: Rewrites, verbose: bool = True) -> dict:
    """Swap the rewrites into `module`, in place; returns what `undo` needs (verbose: say which layers scan)."""
    use_scan_rnn(module, verbose, recurrence=rewrites.recurrence, chunk=rewrites.scan_chunk)
    swapped = use_xla_linear(module) if rewrites.linear_grad else {}  # {layer: its own class}
    if rewrites.host_platform:  # a TPU has select-and-scatter and a random-bit generator of its own
        if rewrites.device_data is not None:
            dropout.DEVICE_DATA[rewrites.device_data[0]] = rewrites.device_data[1]
        swapped.update(use_tiled_max_pool(module))
        swapped.update(use_hashed_dropout(module))
    return swapped


def undo(module: nn.Module, swapped: dict) -> None:
    """The net's own modules back (after the runtime moved its parameters back to the CPU)."""
    restore_rnn(module)
    compat.restore_classes(swapped)
