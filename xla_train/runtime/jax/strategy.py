"""The Lightning strategy of the JAX runtime: Lightning keeps the loop, the callbacks, the logging and the checkpoints'
timing; the engine (runtime/jax/engine.py) runs every step.

To Lightning this is n devices in a world of one process, whose module stays on the host: batches are not moved,
gradients are not reduced, and the optimizer's step() is not called, because each training step, its gradient and its
update run inside the engine's program, K steps at a time. The steps are kept until K are there, or until the state
must be true (the end of an epoch or of max_steps, a checkpoint, validation), as on torch_xla.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import ParallelStrategy, SingleDeviceStrategy
from typing_extensions import override

from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.grouped_steps import GroupedSteps
from xla_train.runtime.jax.backend import JaxBackend
from xla_train.runtime.jax.engine import JaxEngine

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


class JaxStrategy(GroupedSteps, SingleDeviceStrategy, ParallelStrategy):
    strategy_name = "jax"
    always_traced = True  # every step is the engine's program
    fallback = False  # there is no Lightning step to fall back to: what cannot be a program is refused, in one line
    grouping_what = "runtime=jax"

    def __init__(self, devices: list, loop: str = "unroll", precision: str = "32", matmul_precision: str = "default"):
        engine = JaxEngine(devices, loop, precision, matmul_precision)
        SingleDeviceStrategy.__init__(
            self,
            device=torch.device("cpu"),
            checkpoint_io=AtomicCheckpointIO(),
            precision_plugin=EngineAutocast("bf16-mixed" if engine.autocast else "32-true"),
        )
        self.parallel_devices = [torch.device("cpu", i) for i in range(len(devices))]
        self.cluster_environment = LightningEnvironment()
        self.engine = engine
        self._backend = JaxBackend(engine)  # what the rest of the package asks of this run's devices
        self._group: list = []

    @property
    def backend(self) -> JaxBackend:
        return self._backend

    # One process, whatever the devices: plain attributes, as SPMD's single host has them.
    global_rank, local_rank, node_rank, world_size = 0, 0, 0, 1

    @property
    @override
    def root_device(self) -> torch.device:
        return torch.device("cpu")

    @property
    @override
    def is_global_zero(self) -> bool:
        return True

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict:
        return {"num_replicas": 1, "rank": 0}

    @override
    def reduce(self, tensor, *args, **kwargs):
        return tensor

    @override
    def all_gather(self, tensor, group=None, sync_grads: bool = False):
        return tensor

    @override
    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision

    @override
    def barrier(self, *args, **kwargs) -> None:
        pass

    @override
    def broadcast(self, obj, src: int = 0):
        return obj

    @contextmanager
    @override
    def block_backward_sync(self):
        yield None

    def agree_to_stop(self, requested: bool) -> bool:
        return requested

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
        self.flush(materialize=True)
        super().teardown()
        from xla_train.runtime.layers import rewrites

        rewrites.undo(self.model, getattr(self, "_swapped", {}))
        self._swapped = {}
