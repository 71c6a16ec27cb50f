"""The Lightning strategy of the JAX runtime: Lightning keeps the loop, the callbacks, the logging and the checkpoints'
timing; the engine (runtime/engine/jax/engine.py) runs every step.

To Lightning this is n devices in a world of one process, whose module stays on the host: batches are not moved,
gradients are not reduced, and the optimizer's step() is not called, because each training step, its gradient and its
update run inside the engine's program, K steps at a time. The steps are kept until K are there, or until the state
must be true (the end of an epoch or of max_steps, a checkpoint, validation), as on torch_xla.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.strategies import ParallelStrategy, SingleDeviceStrategy
from typing_extensions import override

from xla_train import compat
from xla_train.errors import ConfigError
from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.engine.jax.backend import JAX_BACKEND
from xla_train.runtime.engine.jax.engine import JaxEngine
from xla_train.runtime.functional_optimizer import FunctionalOptimizer


class JaxStrategy(SingleDeviceStrategy, ParallelStrategy):
    strategy_name = "jax"

    steps_per_execution = 1
    grouping_note = ""
    auto_pending = False
    auto_steps = False

    def __init__(self, devices: list, loop: str = "unroll", precision: str = "32", matmul_precision: str = "default"):
        SingleDeviceStrategy.__init__(
            self,
            device=torch.device("cpu"),
            checkpoint_io=AtomicCheckpointIO(),
        )
        self.parallel_devices = [torch.device("cpu", i) for i in range(len(devices))]
        self.cluster_environment = LightningEnvironment()
        self.engine = JaxEngine(devices, loop, precision, matmul_precision)
        self.execution_loop = loop
        self._group: list = []

    backend = JAX_BACKEND

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
        windows runs as a reduction and dropout hashes its mask, as on torch_xla (runtime/max_pool.py,
        runtime/dropout.py): JAX's select-and-scatter and random bits cost XLA:CPU as much as torch_xla's do."""
        from xla_train.runtime.dropout import use_hashed_dropout
        from xla_train.runtime.engine.jax.recurrence import jax_recurrence
        from xla_train.runtime.max_pool import use_tiled_max_pool
        from xla_train.runtime.scan_rnn import use_scan_rnn

        use_scan_rnn(self.model, recurrence=jax_recurrence)  # every nn.LSTM, nn.GRU, nn.RNN as a scan
        self._swapped = {}
        if self.engine.platform == "cpu":
            self._swapped.update(use_tiled_max_pool(self.model))
            self._swapped.update(use_hashed_dropout(self.model))

    @override
    def batch_to_device(self, batch, device=None, dataloader_idx: int = 0):
        return batch  # the engine puts each batch on the mesh

    def fit_to_run(self, steps: int, run_steps: float | None = None) -> None:
        """K against an epoch of `steps` training steps: auto's K shrinks to it, a K set by hand that is longer is
        refused (as on torch_xla, runtime/steps_per_execution.py)."""
        if self.auto_pending and run_steps is not None:
            k, self.grouping_note, self.auto_pending = JAX_BACKEND.auto_steps(self.execution_loop, run_steps)
            self.steps_per_execution = k
        if self.steps_per_execution <= steps:
            return
        if not self.auto_steps:
            raise ConfigError(
                f"steps_per_execution={self.steps_per_execution} is more than the {steps} training steps of an "
                f"epoch; use at most {steps}"
            )
        self.steps_per_execution = max(1, int(steps))
        self.grouping_note = f"{self.steps_per_execution} (auto: the steps of an epoch)"

    @override
    def setup(self, trainer) -> None:
        super().setup(trainer)
        JAX_BACKEND.listen()
        JAX_BACKEND.engine = self.engine
        self.engine.bind(self.lightning_module, torch.initial_seed())
        self._group = []
        if trainer.state.fn != "fit":
            return
        if trainer.accumulate_grad_batches != 1 or trainer.gradient_clip_val:
            raise ConfigError(
                "runtime=jax runs the optimizer's update inside the program: accumulate_grad_batches and "
                "gradient_clip_val are not supported there (use runtime=torch_xla)"
            )
        if len(self.optimizers) != 1:
            raise ConfigError("runtime=jax runs one optimizer inside the program")
        FunctionalOptimizer(self.optimizers[0])  # refuses what it cannot run, before any step

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        trainer = self.lightning_module.trainer
        self.fit_to_run(trainer.num_training_batches, trainer.estimated_stepping_batches)

    # --- the steps ---------------------------------------------------------------------------------------------
    @override
    def training_step(self, *args, **kwargs):
        batch, batch_idx = tuple(args[0]), args[1]
        trainer = self.lightning_module.trainer
        self.engine.ensure_state(trainer.optimizers[0])
        opt = self.engine.opt
        step = trainer.global_step + len(self._group)
        self._group.append((batch, opt.scalars(opt.steps_done + len(self._group) + 1), step))
        last = batch_idx + 1 >= trainer.num_training_batches or 0 < trainer.max_steps <= trainer.global_step + 1
        if len(self._group) == self.steps_per_execution or last:
            self.flush()
        return torch.tensor(float("nan"))  # a step's loss stays on the device

    @property
    def at_execution_end(self) -> bool:
        return not self._group

    @override
    def backward(self, closure_loss, optimizer, *args, **kwargs):
        return closure_loss  # the gradient is taken inside the program

    @override
    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        result = closure()  # the training step: keeps the batch, and runs the group when it is full
        compat.mark_optimizer_stepped(optimizer)
        return result

    def flush(self) -> None:
        if not self._group:
            return
        group, self._group = self._group, []
        self.engine.train(
            [b for b, _, _ in group], [r for _, r, _ in group], [s for _, _, s in group], self.steps_per_execution
        )

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
    def _state_to_torch(self) -> None:
        self.flush()
        self.engine.to_torch()

    @override
    def lightning_module_state_dict(self):
        self._state_to_torch()
        return super().lightning_module_state_dict()

    @override
    def optimizer_state(self, optimizer):
        self._state_to_torch()
        return super().optimizer_state(optimizer)

    @override
    def load_model_state_dict(self, checkpoint, strict: bool = True) -> None:
        super().load_model_state_dict(checkpoint, strict=strict)
        self.engine.drop_state()

    @override
    def load_optimizer_state_dict(self, checkpoint) -> None:
        super().load_optimizer_state_dict(checkpoint)
        self.engine.drop_state()

    @override
    def on_validation_start(self) -> None:
        self.flush()
        super().on_validation_start()

    @override
    def on_train_end(self) -> None:
        self._state_to_torch()
        super().on_train_end()

    @override
    def teardown(self) -> None:
        self._state_to_torch()
        JAX_BACKEND.engine = None
        super().teardown()
        from xla_train.runtime.scan_rnn import restore_rnn

        restore_rnn(self.model)
        compat.restore_classes(getattr(self, "_swapped", {}))
        self._swapped = {}
