"""Where the engine's arrays live: one 1-D `data` mesh over every device of every process, the state replicated on
it and each batch split along it, as torch_xla's SPMD mesh does (runtime/torch_xla/spmd.py, DataMesh).

Kept apart from the engine (runtime/jax/engine.py) because it is the one place that knows several processes feed
one program: a process puts only its own rows of a global batch, and reads a replicated array from its own copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from xla_train.runtime.jax.backend import COUNTS
from xla_train.runtime.jax.multihost import watching

DATA_AXIS = "data"


class DataMesh:
    """The mesh of `devices` (every process's) and the three ways an array lies on it."""

    def __init__(self, devices: Sequence) -> None:
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        self.processes = jax.process_count()
        self.mesh = Mesh(np.array(list(devices)), (DATA_AXIS,))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.batch = NamedSharding(self.mesh, PartitionSpec(DATA_AXIS))
        self.stacked = NamedSharding(self.mesh, PartitionSpec(None, DATA_AXIS))  # K batches: (K, batch, ...)

    def put(self, a: np.ndarray, sharding):
        """A host array as the programs take it. Replicated, it is the same on every process; split over the mesh,
        it is this process's rows of the global array (its slice of each global batch, in process order)."""
        import jax

        if self.processes == 1:
            return jax.device_put(a, sharding)
        shape = list(a.shape)
        for dim, axis in enumerate(sharding.spec):
            if axis == DATA_AXIS:
                shape[dim] *= self.processes
        return jax.make_array_from_process_local_data(sharding, a, tuple(shape))

    def replicate(self, a: np.ndarray):
        return self.put(a, self.replicated)


class HostSums:
    """A stage's metric sums, kept on the device and read on the host only when asked (`.cpu()`, as for a tensor),
    or already read with the step's loss (`host`: JaxEngine.step_loss), so asking again reads nothing."""

    def __init__(self, array, host: np.ndarray | None = None) -> None:
        self.array, self.host = array, host

    def cpu(self) -> torch.Tensor:
        if self.host is None:
            COUNTS.reads += 1
            self.host = whole(self.array).astype(np.float32)
        return torch.from_numpy(self.host.copy())


def whole(a) -> np.ndarray:
    """A replicated array on the host, read from this process's own copy: with several processes the array spans
    devices this one cannot address, and each holds all of it."""
    import jax

    with watching(jax.process_count()):
        return np.array(a.addressable_data(0))


def host_array(t: torch.Tensor) -> np.ndarray:
    """A host tensor as the numpy array JAX takes: int64 as int32 (JAX's 64-bit integers are off by default)."""
    a = t.detach().cpu().numpy()
    return a.astype(np.int32) if a.dtype == np.int64 else a
