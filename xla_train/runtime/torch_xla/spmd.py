"""Data parallelism over every XLA device of the host (and of every host of a pod slice): one SPMD program.

One process per host drives all devices through torch_xla's SPMD partitioner (a 1-D `data` mesh, each batch
split along dimension 0, all state replicated), so the step compiles once for every device; it is also the only
data parallelism XLA:CPU runs (pytorch/xla#5005). To Lightning it is n devices in a world of one process per host,
so each process gets its host's whole share of the global batch and gradients need no reduction of Lightning's.
While it runs, BatchNorm computes its statistics from plain reductions: GSPMD cannot split XLA's fused batch norm
along the batch (docs/scaling.md, "One program for every device (SPMD)").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from lightning.pytorch.strategies import ParallelStrategy
from torch import nn
from typing_extensions import override

from xla_train import compat
from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.checkpoint import to_cpu
from xla_train.errors import HardwareError
from xla_train.runtime.torch_xla.engine import OneDevice, TorchXlaEngine
from xla_train.runtime.hosts import HostTopology, ProgramHosts
from xla_train.runtime.torch_xla.multihost import StoreChannel
from xla_train.runtime.torch_xla.strategy import TorchXlaSteps, device_loader

DATA_AXIS = "data"


def enable_spmd() -> None:
    """Switch this process to SPMD; must come before the first XLA tensor exists (torch_xla warns otherwise)."""
    import torch_xla.runtime as xr

    if not xr.is_spmd():
        xr.use_spmd()


def data_mesh(n: int):
    """A 1-D mesh named `data` over the n devices (XLA requires a mesh over every device of the runtime)."""
    import numpy as np
    import torch_xla.distributed.spmd as xs

    return xs.Mesh(np.arange(n), (n,), (DATA_AXIS,))


def batch_sharding(mesh, minibatch: bool = False):
    """The input sharding of every batch: dimension 0 of each tensor split over the mesh's `data` axis.

    With `minibatch` (several hosts) the rows a host loads are its slice of the global batch, not all of it.
    """
    import torch_xla.distributed.spmd as xs

    @dataclass
    class BatchShardingSpec(xs.ShardingSpec):
        """Splits dimension 0 of every tensor in a batch over the `data` axis, whatever the tensor's rank.

        torch_xla's ShardingSpec fits tensors of one rank only, and leaves the others replicated;
        a batch here is (inputs, labels) of different ranks, and both must be split.
        """

        def xla_spec(self, t: torch.Tensor):
            if t.dim() == 0:
                return None
            spec = xs.ShardingSpec(self.mesh, (DATA_AXIS,) + (None,) * (t.dim() - 1), minibatch=self.minibatch)
            return spec.xla_spec(t)

        def can_apply(self, t: torch.Tensor) -> bool:
            return t.dim() > 0

    return BatchShardingSpec(mesh, (DATA_AXIS,), minibatch=minibatch)


def _reduction_batch_norm(self, x: torch.Tensor) -> torch.Tensor:
    """nn.BatchNorm{1,2,3}d.forward, with the statistics as reductions that GSPMD can partition.

    Under autocast the input arrives in bf16; stock batch_norm is on autocast's float32 list (it computes and
    returns float32), so this one computes in float32 too, or bf16 sums would blur the statistics."""
    if x.dtype != torch.float32 and torch.is_autocast_enabled(x.device.type):
        x = x.float()
    dims = [0, *range(2, x.dim())]
    shape = (1, -1) + (1,) * (x.dim() - 2)
    if self.training or not self.track_running_stats:
        # Two passes: E[(x - mean)^2] costs a second all-reduce, but E[x^2] - E[x]^2 loses float32 precision
        # to cancellation when a channel's mean is large against its spread (tests/test_spmd.py compares
        # the gradients with float64 ones).
        mean = x.mean(dims)
        centred = x - mean.reshape(shape)
        var = (centred * centred).mean(dims)  # biased, as the normalisation uses
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = 1.0 / self.num_batches_tracked if self.momentum is None else self.momentum
                n = x.numel() // x.shape[1]
                self.running_mean.mul_(1 - m).add_(mean * m)
                self.running_var.mul_(1 - m).add_(var * (m * n / max(1, n - 1)))  # unbiased, as torch keeps it
        y = centred * torch.rsqrt(var.reshape(shape) + self.eps)
    else:
        mean, var = self.running_mean, self.running_var
        y = (x - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + self.eps)
    if self.affine:
        y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
    return y


BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)  # and their subclasses


def use_reduction_batch_norm(module: nn.Module) -> dict[nn.Module, type]:
    """Give every BatchNorm layer in `module` the reduction forward; returns {layer: its own class} to undo it."""
    return compat.swap_forward(module, BATCH_NORMS, _reduction_batch_norm)


def restore_batch_norm(changed: dict[nn.Module, type]) -> None:
    compat.restore_classes(changed)


def require_replicated(state, where: str = "checkpoint") -> None:
    """Every XLA tensor in `state` must be whole on every device, for `.cpu()` on each host to read all of it.

    torch_xla's own distributed checkpoint reads replicated tensors exactly so, on
    every host (experimental/distributed_checkpoint/_helpers.py, _sharded_cpu_state_dict:
    _xla_get_cpu_tensors, the call behind .cpu()); only tensors split over devices
    need its per-shard writer. This strategy splits nothing but the input batch, so a
    split tensor in the state is a bug, refused before a wrong file is written.
    """
    split = []

    def visit(obj, key: str) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.device.type == "xla" and xla_compat.xla_sharded_across_devices(obj):
                split.append(key)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                visit(v, f"{key}.{k}" if key else str(k))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                visit(v, f"{key}[{i}]")

    visit(state, "")
    if split:
        raise HardwareError(
            f"the {where} holds tensors split over the XLA devices ({', '.join(split[:3])}"
            f"{', ...' if len(split) > 3 else ''}), which one host cannot read whole; xla_train's "
            f"SPMD replicates all state, so this is a bug: please report it"
        )


@compat.counts_as_lightning_xla_strategy
class SPMDStrategy(ProgramHosts, TorchXlaSteps, ParallelStrategy):
    """One process per host, one compiled program, n devices: the batch is split, everything else is replicated.

    Under SPMD torch_xla shows the n devices as one virtual device, the root device, where the engine places the
    model, with a sharded input; Lightning counts the n devices of `parallel_devices`. With several hosts it is
    also one rank of a world of hosts, and passes the few host-side answers Lightning shares between ranks over
    runtime/torch_xla/multihost.py's channel.
    """

    strategy_name = "spmd"

    def __init__(self, num_devices: int, accelerator=None, precision_plugin=None, topology: HostTopology | None = None):
        import torch_xla

        enable_spmd()
        # num_devices are this host's; the mesh spans every host's (the same on a single host)
        topology = topology or HostTopology(0, 1, num_devices, num_devices)
        super().__init__(
            accelerator=accelerator,
            parallel_devices=[torch.device("xla", i) for i in range(num_devices)],
            precision_plugin=precision_plugin,
        )
        self.mesh = data_mesh(topology.global_devices)
        self.engine = TorchXlaEngine(DataMesh(torch_xla.device(0), self.mesh, topology))
        self.place_in_world(topology)
        self._batch_norms: dict[nn.Module, type] = {}

    @property
    @override
    def root_device(self) -> torch.device:
        return self.engine.device

    @override
    def setup(self, trainer) -> None:
        self._batch_norms = use_reduction_batch_norm(self.model)
        super().setup(trainer)

    @override
    def teardown(self) -> None:
        super().teardown()
        restore_batch_norm(self._batch_norms)
        self._batch_norms = {}

    def open_channel(self) -> StoreChannel:
        return StoreChannel()

    @override
    def reduce(self, tensor, *args, **kwargs):
        return tensor  # sums over a sharded batch are already global: every host holds the same total

    @override
    def save_checkpoint(self, checkpoint: dict, filepath, storage_options=None) -> None:
        if not self.topology.multi_host:
            return super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)
        # Every host runs the pending work and reads its replicas: a device program or transfer run by host 0
        # alone would wait forever for the other hosts' part. Then host 0 alone writes.
        import torch_xla

        torch_xla.sync()
        require_replicated(checkpoint)
        checkpoint = to_cpu(checkpoint)
        if self.is_global_zero:
            self.checkpoint_io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    @override
    def process_dataloader(self, dataloader):
        sharding = batch_sharding(self.mesh, minibatch=self.topology.multi_host)
        return device_loader(dataloader, self.root_device, input_sharding=sharding)


class DataMesh(OneDevice):
    """Where a program's tensors go under SPMD: each step's batch split over the `data` mesh, the state replicated."""

    def __init__(self, device: torch.device, mesh, topology: HostTopology) -> None:
        super().__init__(device)
        self.mesh, self.topology = mesh, topology
        self._replicated: dict = {}  # OpSharding by rank, built once

    def rows(self, rows: torch.Tensor) -> torch.Tensor:
        """This host's rows of a batch-like tensor (dimension 0), placed as a loaded batch is: split over the
        mesh, each host sending its own rows of the global tensor."""
        import torch_xla.core.xla_model as xm

        sharding = batch_sharding(self.mesh, minibatch=self.topology.multi_host)
        return xm.send_cpu_data_to_device([rows], self.device, input_sharding=sharding)[0]

    def pad_like(self, t: torch.Tensor) -> torch.Tensor:
        """Zeros placed as a loaded batch is: each host sends its own rows (the global batch / hosts); a step
        number is replicated."""
        if t.dim() == 0:
            return super().pad_like(t)
        rows = t.shape[0] // self.topology.process_count
        return self.rows(torch.zeros((rows, *t.shape[1:]), dtype=t.dtype))

    def shard_steps(self, stacked: torch.Tensor) -> torch.Tensor:
        """K stacked batches: each step's batch split over the mesh as a single batch is (dimension 1); K step
        numbers stay replicated. An annotation on pending work, so nothing runs here."""
        import torch_xla.distributed.spmd as xs

        if stacked.dim() < 2:
            return stacked
        xs.mark_sharding(stacked, self.mesh, (None, DATA_AXIS) + (None,) * (stacked.dim() - 2))
        return stacked

    def place_state(self, t: torch.Tensor) -> torch.Tensor:
        """Each state tensor the K program returns, marked replicated: the body was traced with the parameters'
        shardings but the program's outputs carry none, so sharding propagation would choose them, and a TPU's
        partitioner may split a parameter or a moment that a checkpoint then refuses (require_replicated). An
        annotation on pending work: nothing runs here."""
        if t.dim():
            if t.dim() not in self._replicated:
                self._replicated[t.dim()] = self.mesh.get_op_sharding((None,) * t.dim())
            xla_compat.xla_mark_sharding(t, self._replicated[t.dim()])
        return t
