"""The Lightning strategy of the JAX runtime: Lightning keeps the loop, the callbacks, the logging and the checkpoints'
timing; the engine (runtime/jax/engine.py) runs every step.

To Lightning this is one process of n devices, in a world of one process per host (runtime/hosts.py), whose module
stays on the host: batches are not moved, gradients are not reduced, and the optimizer's step() is not called, because
each training step, its gradient and its update run inside the engine's program over every process's devices, K steps
at a time. The steps are kept until K are there, or until the state
must be true (the end of an epoch or of max_steps, a checkpoint, validation), as on torch_xla.
"""

from __future__ import annotations

import numpy as np
import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import ParallelStrategy
from typing_extensions import override

from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.grouped_steps import GroupedSteps
from xla_train.runtime.hosts import HostTopology, ProgramHosts
from xla_train.runtime.jax.backend import JaxBackend
from xla_train.runtime.jax.engine import JaxEngine
from xla_train.runtime.jax.multihost import ProcessChannel
from xla_train.runtime.jax.placement import host_array

# The scan's time steps per loop iteration on a JAX platform, where not runtime/layers/scan_rnn.py's CHUNK (1, the
# CPU's). On a GPU each iteration of a While loop has a fixed cost beside a time step of the tutorial's LSTM, a few
# small kernels: on an H200 the IMDB LSTM stepped about twice as fast at 4 as at 1, and 8 and 16 were no faster and
# longer to compile (docs/results.md, "The scan's chunk on a GPU"). A TPU's is not measured.
SCAN_CHUNKS = {"gpu": 4}


def layer_rewrites(devices: int, platform: str, chunk: int | None = None):
    """What JAX hands the layer rewrites (runtime/layers/rewrites.py): its lax.scan recurrence built for `devices`,
    the platform's time steps per loop iteration unless `chunk` is set, and on XLA:CPU the reductions for max pooling
    and dropout. `bench overhead`'s hand-written loop swaps in the same, so both sides run one graph."""
    from xla_train.runtime.jax.recurrence import jax_recurrence
    from xla_train.runtime.layers.rewrites import Rewrites

    return Rewrites(jax_recurrence(devices), chunk or SCAN_CHUNKS.get(platform, 1), False, platform == "cpu")


class EngineAutocast(Precision):
    """Lightning's plugin that adds nothing to a step, named for the precision the engine computes in: the engine
    autocasts inside its own programs, so trainer.precision (the run report's line) says what ran."""

    def __init__(self, precision: str) -> None:
        self.precision = precision


class JaxStrategy(GroupedSteps, ProgramHosts, ParallelStrategy):
    """Lightning's strategy for the JAX engine, which it holds: one process of the program's (one on one host, one a
    host on a pod slice), n devices of its own. Where Lightning needs a collective, it is the engine's."""

    strategy_name = "jax"
    always_traced = True  # every step is the engine's program
    fallback = False  # there is no Lightning step to fall back to: what cannot be a program is refused, in one line
    grouping_what = "runtime=jax"
    hosts_advice = "on runtime=jax num_nodes is the number of processes"

    def __init__(
        self,
        devices: list,
        loop: str = "unroll",
        precision: str = "32",
        matmul_precision: str = "default",
        topology: HostTopology | None = None,
    ):
        engine = JaxEngine(devices, loop, precision, matmul_precision)  # devices: every process's
        topology = topology or HostTopology(0, 1, len(devices), len(devices))
        super().__init__(
            parallel_devices=[torch.device("cpu", i) for i in range(topology.local_devices)],
            checkpoint_io=AtomicCheckpointIO(),
            precision_plugin=EngineAutocast("bf16-mixed" if engine.autocast else "32-true"),
        )
        self.place_in_world(topology)
        self.engine = engine
        self._backend = JaxBackend(engine)  # what the rest of the package asks of this run's devices
        self._group: list = []

    @property
    def backend(self) -> JaxBackend:
        return self._backend

    @property
    @override
    def root_device(self) -> torch.device:
        return torch.device("cpu")  # the module stays on the host; its state is the engine's

    def open_channel(self) -> ProcessChannel:
        return ProcessChannel(self.engine)

    @override
    def reduce(self, tensor, group=None, reduce_op="mean"):
        """What the engine's programs computed (a stage's sums: HostSums) is over the global batch, the same on every
        process, so it stays as it is; a process's own tensor is summed, or averaged, over the processes."""
        if not self.topology.multi_host or not isinstance(tensor, torch.Tensor):
            return tensor
        total = self.all_gather(tensor).sum(0)
        return total if str(reduce_op).lower().endswith("sum") else total / self.world_size

    @override
    def all_gather(self, tensor, group=None, sync_grads: bool = False):
        if not self.topology.multi_host:
            return tensor
        return torch.from_numpy(np.array(self.engine.gather(host_array(tensor)))).to(tensor.dtype)

    @override
    def model_to_device(self) -> None:
        """The module stays on the host; its state goes to the devices as arrays. On XLA:CPU, max pooling over tiling
        windows runs as a reduction and dropout hashes its mask, as on torch_xla (runtime/layers/max_pool.py,
        runtime/layers/dropout.py): JAX's select-and-scatter and random bits cost XLA:CPU as much as torch_xla's do."""
        from xla_train.runtime.layers import rewrites

        # every nn.LSTM, nn.GRU, nn.RNN as a scan, with the platform's time steps per loop iteration
        engine = self.engine
        self._swapped = rewrites.apply(
            self.model, layer_rewrites(len(engine.devices), engine.platform, self.scan_chunk)
        )

    @override
    def batch_to_device(self, batch, device=None, dataloader_idx: int = 0):
        return batch  # the engine puts each batch on the mesh

    @override
    def setup(self, trainer) -> None:
        super().setup(trainer)
        self._backend.listen()
        self.engine.bind(self.lightning_module, torch.initial_seed())

    # --- the steps: training steps are GroupedSteps', run by the engine; evaluation one batch a program ---------
    @override
    def validation_step(self, *args, **kwargs):
        self._evaluate("validation_step", "val", args[0])

    @override
    def test_step(self, *args, **kwargs):
        self._evaluate("test_step", "test", args[0])

    def _evaluate(self, method: str, stage: str, batch) -> None:
        self.flush()
        self.engine.ensure_state()
        self.engine.evaluate(method, stage, tuple(batch))

    @override
    def predict_step(self, *args, **kwargs):
        self.engine.ensure_state()
        return self.engine.predict(tuple(args[0]))

    # --- the state as torch sees it ----------------------------------------------------------------------------

    @override
    def load_model_state_dict(self, checkpoint, strict: bool = True) -> None:
        super().load_model_state_dict(checkpoint, strict=strict)
        self.engine.drop_state()

    @override
    def load_optimizer_state_dict(self, checkpoint) -> None:
        super().load_optimizer_state_dict(checkpoint)
        self.engine.drop_state()

    @override
    def on_train_end(self) -> None:
        super().on_train_end()
        self.flush(materialize=True)  # the module a fit hands back holds what it trained

    @override
    def teardown(self) -> None:
        if not self.engine.lost:  # another process ended: no program of theirs can run, nor is there state to take
            self.flush(materialize=True)
        super().teardown()
        from xla_train.runtime.layers import rewrites

        rewrites.undo(self.model, getattr(self, "_swapped", {}))
        self._swapped = {}
