"""What every XLA runtime's engine does for a fit's training steps, as one interface: the Lightning strategies of both
runtimes (runtime/grouped_steps.py) keep Lightning's single steps and hand them to their engine, K at a time,
so neither strategy knows how a runtime traces, places or runs a program. torch_xla's engine is
runtime/torch_xla/engine.py, JAX's runtime/jax/engine.py. What they need of the LightningModule is StepModule."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch
from torch import nn

from xla_train.runtime.functional_optimizer import FunctionalOptimizer


class StepModule(Protocol):
    """The LightningModule as the runtimes use it (training/module.py's Classifier): its steps, the on-device metric
    sums a step adds to, what a step reads besides its batch, and nn.Module's state. tests/test_layout_lightning.py
    checks that Classifier has every member, and that the engines and strategies ask the module for nothing else."""

    training: bool
    trainer: Any  # the Trainer it is attached to: the loop's counts (grouped_steps.py)
    net: nn.Module  # the plain net: the eager fast path compiles it (runtime/eager/fast_path.py)
    epoch_metrics: dict[str, float]  # what an xla_mp worker hands back (runtime/torch_xla/multiprocess.py)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor: ...
    def validation_step(self, batch, batch_idx: int) -> Any: ...
    def test_step(self, batch, batch_idx: int) -> Any: ...
    def predict_step(self, batch, batch_idx: int) -> Any: ...

    def step_state(self, stage: str = "train") -> dict[str, torch.Tensor]:
        """The on-device sums a step of `stage` adds to: a program carries them through its steps."""

    def load_step_state(self, state: dict[str, torch.Tensor]) -> None: ...

    def execution_inputs(self) -> list[torch.Tensor]:
        """Device tensors the steps read that change per epoch, passed to a program once per execution."""

    def program_inputs(self, train: bool) -> dict[str, tuple[Any, bool]]:
        """What a step reads besides its batch, as host arrays (and whether each is split as a batch is)."""

    def reading(self, tensors: dict[str, torch.Tensor]) -> AbstractContextManager:
        """A step traced inside it reads `tensors` (program_inputs' arrays, as the program's own) instead."""

    def parameters(self) -> Iterator[nn.Parameter]: ...
    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]: ...
    def named_buffers(self) -> Iterator[tuple[str, torch.Tensor]]: ...
    def modules(self) -> Iterator[nn.Module]: ...
    def train(self, mode: bool = True) -> Any: ...


class Engine:
    """A runtime's engine: a group of training steps traced once and run as one program, their per-step random keys,
    and the state given back to the torch module. Each method says what the strategy relies on."""

    loop = "unroll"  # how a program runs its K steps: "unroll" or "while" (a While loop); the strategy may set it
    # until the first program is made (execution_loop=auto on XLA:CPU waits for the net: grouped_steps.choose_loop)

    def optimizer(self, optimizer: torch.optim.Optimizer) -> FunctionalOptimizer:
        """The functional form of the fit's optimizer, made once per fit at its first step (after a resume has
        restored the optimizer's state): its per-step scalars go into each step's row."""
        raise NotImplementedError

    def start_group(self, batch: tuple, row: Sequence[float], k: int) -> int:
        """A group of up to `k` steps begins with `batch`: make its program if these shapes have none. Returns how
        many device values the step read on the host while traced (0: it is a program; else it cannot be one)."""
        raise NotImplementedError

    def step_key(self, step: int):
        """What the training step numbered `step` draws its random numbers from, kept with its batch."""
        raise NotImplementedError

    def train(self, batches: Sequence, rows: Sequence, keys: Sequence, k: int) -> None:
        """Run len(batches) <= k kept steps as one program of k; the state stays on the devices, dispatched."""
        raise NotImplementedError

    def step_loss(self, read: bool) -> torch.Tensor | None:
        """The loss of the last step the last program ran, for Lightning's `outputs["loss"]`: a tensor that asks
        no host read of its own. `read`: the host reads this execution's metric sums anyway (the finite-loss check
        after each program of K>1 steps), so an engine whose loss must be read to be a torch tensor may read it
        then; else such an engine gives None."""
        raise NotImplementedError

    def after_step(self, optimizer, at_execution_end: bool) -> None:
        """Lightning's optimizer step for a kept step, whose update runs inside the program."""
        raise NotImplementedError

    def to_torch(self) -> None:
        """Make the torch module and optimizer hold every step run so far (a checkpoint, the end of a fit)."""
        raise NotImplementedError
