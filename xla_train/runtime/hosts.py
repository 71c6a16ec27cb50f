"""Processes that run one program over every device of every process: torch_xla's SPMD pod hosts and JAX's
multi-controller runtime, the Lightning side they share.

To Lightning each process is one node of its own devices (one rank of a world of processes). The program's sums are
over the global batch, so they are already the same on every process and Lightning reduces nothing of them; the few
host-side answers Lightning shares between ranks (the run folder, whether to stop, "the checkpoint is on disk") go
over the runtime's channel between the processes (`HostChannel`): torch_xla's rendezvous store, JAX's collectives.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass

from lightning.fabric.plugins.environments import LightningEnvironment

from xla_train import compat
from xla_train.errors import HardwareError


@dataclass(frozen=True)
class HostTopology:
    process_index: int = 0
    process_count: int = 1
    local_devices: int = 1
    global_devices: int = 1

    @property
    def multi_host(self) -> bool:
        return self.process_count > 1


class HostChannel(ABC):
    """Small pickled messages between the processes; every process must make the same calls in the same order.

    A broadcast carries the caller's code location, so processes that fall out of step fail with a message instead
    of exchanging each other's values."""

    rank: int = 0
    world: int = 1

    @abstractmethod
    def broadcast(self, obj, src: int = 0, site: str = ""): ...

    @abstractmethod
    def all_gather(self, obj) -> list: ...

    def barrier(self) -> None:
        self.all_gather(None)

    def out_of_step(self, src: int, their_site: str, site: str) -> RuntimeError:
        return RuntimeError(
            f"hosts out of step: host {src} broadcast from {their_site}, host {self.rank} expected one from {site}"
        )


class ProgramHosts:
    """For a Lightning ParallelStrategy (mixed in before it) whose processes run one program: it places itself with
    `place_in_world(topology)` and opens its runtime's channel in `open_channel`."""

    topology = HostTopology()
    # Plain attributes, where ParallelStrategy has properties; place_in_world sets them (rank 0 of 1 on one host).
    global_rank, local_rank, node_rank, world_size = 0, 0, 0, 1
    hosts_advice = "leave num_nodes unset on XLA, the runtime knows its hosts"  # a wrong num_nodes, in one line
    _channel: HostChannel | None = None

    def place_in_world(self, topology: HostTopology) -> None:
        self.topology = topology
        self.cluster_environment = LightningEnvironment()  # one process per host: never launches any
        self.global_rank = self.node_rank = topology.process_index
        self.world_size = topology.process_count

    def open_channel(self) -> HostChannel:
        raise NotImplementedError

    # num_nodes and set_world_ranks are not methods of any base class: Lightning's accelerator connector looks
    # for them with hasattr (as DDPStrategy has them), so they carry no @override.
    @property
    def num_nodes(self) -> int:
        return self.topology.process_count

    @num_nodes.setter
    def num_nodes(self, n: int) -> None:  # Lightning passes on Trainer(num_nodes=...)
        if n != self.topology.process_count:
            raise HardwareError(
                f"num_nodes={n} but the XLA runtime has {self.topology.process_count} host(s); {self.hosts_advice}"
            )

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    def set_world_ranks(self) -> None:
        if self.topology.multi_host:  # Lightning's rank_zero_only loggers and messages: host 0 only
            self.cluster_environment.set_world_size(self.world_size)
            self.cluster_environment.set_global_rank(self.global_rank)
            compat.set_rank_zero_only(self.global_rank)

    @property
    def distributed_sampler_kwargs(self) -> dict:
        return {"num_replicas": self.world_size, "rank": self.global_rank}  # one host loads its global-batch share

    @property
    def channel(self) -> HostChannel:
        if self._channel is None:
            self._channel = self.open_channel()
        return self._channel

    def broadcast(self, obj, src: int = 0):
        if not self.topology.multi_host:
            return obj
        return self.channel.broadcast(obj, src, site=compat.caller_site())

    def barrier(self, *args, **kwargs) -> None:
        if self.topology.multi_host:
            self.channel.barrier()

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        # no device tensor, no device sync: on one host there is nothing to agree with
        if not self.topology.multi_host:
            return decision
        decisions = self.channel.all_gather(bool(decision))
        return builtins.all(decisions) if all else any(decisions)

    def agree_to_stop(self, requested: bool) -> bool:
        """Whether any host was asked to stop; every host calls it once after every execution of steps.

        A preemption signal reaches the hosts at different steps. A host that stopped on its own would save while
        the others ran the next step's program, and the slice would hang; asked here, every host stops after one
        same step, at the cost of one host-side exchange an execution.
        """
        return self.reduce_boolean_decision(requested, all=False)

    @contextmanager
    def block_backward_sync(self):
        yield None
