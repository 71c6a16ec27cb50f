"""`steps_per_execution=K` on the XLA strategies: Lightning still sees every step; XLA runs K at once.

Lightning's loop, callbacks, scheduler, checkpoints and resume all count single steps, so the strategy keeps each
batch with its learning rate and device seed and runs every K as one program traced once (runtime/step_program.py),
its optimizer update inside (runtime/functional_optimizer.py); auto's K=1 is such a program too. A group runs
early, with the steps it has, whenever the state must be true: at the end of an epoch or of max_steps, before a
checkpoint, before validation (docs/feeding.md, "Keep a TPU fed"). A step that reads device values on the host
while traced cannot be a program: its values would be the first batch's.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from xla_train import compat
from xla_train.errors import ConfigError
from xla_train.runtime.backend import backend_of
from xla_train.runtime.engine.grouped_steps import GroupedSteps
from xla_train.runtime.functional_optimizer import FunctionalOptimizer
from xla_train.runtime.step_program import Layout, StepProgram


class StepsPerExecution(GroupedSteps):
    """For the XLA strategies: with steps_per_execution > 1, batches are kept and run K at a time."""

    @property
    def backend(self):
        return backend_of(self.root_device)

    def _reset_group(self) -> None:
        self._group, self._rows, self._seeds, self._shared = [], [], [], []

    @override
    def setup(self, trainer) -> None:
        super().setup(trainer)
        self._reset_group()
        self._programs, self._opt, self._signature = {}, None, None  # batch shapes -> (program, padding batches)
        if not self._grouping or trainer.state.fn != "fit":
            return
        try:
            self.check_groupable(trainer)
        except ConfigError as e:
            if not self.auto_steps:
                raise
            self._one_step_at_a_time(str(e))

    def _one_step_at_a_time(self, why: str) -> None:
        """auto, where this run's steps cannot be a program: Lightning's own step, and the report says why."""
        self.steps_per_execution, self.trace_once, self.auto_pending = 1, False, False
        self.grouping_note = f"1 (auto: {why})"

    @override
    def training_step(self, *args, **kwargs):
        if not self._grouping:
            return super().training_step(*args, **kwargs)
        batch, batch_idx = tuple(args[0]), args[1]
        trainer = self.lightning_module.trainer
        if self._opt is None:
            self._opt = FunctionalOptimizer(trainer.optimizers[0])
        signature = tuple((tuple(t.shape), t.dtype) for t in batch)
        if self._group and signature != self._signature:  # a batch of new shapes: its own group and program
            self.flush()
        row = self._opt.scalars(self._opt.steps_done + len(self._group) + 1)
        if not self._group:  # what the group's steps read besides their batches: the epoch's order, at most
            self._shared, self._signature = self.lightning_module.execution_inputs(), signature
            if signature not in self._programs and not self._build(batch, row):
                return super().training_step(*args, **kwargs)  # auto, and the step cannot be a program
        self._group.append(batch)
        self._rows.append(row)
        self._seeds.append(self.backend.rng_state(self.root_device))  # the seed this step would have traced with
        if self.group_ends_at(batch_idx):
            self.flush()
        return torch.tensor(float("nan"))  # the loss of a single step is not read back: it stays on the device

    @override
    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        if not self._grouping:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        result = closure()  # the training step: keeps the batch, and runs the group when it is full
        if not self._grouping:  # its trace read the host, so it ran as Lightning's own step (its gradients are set)
            return super().optimizer_step(optimizer, lambda: result, model, **kwargs)
        if self.at_execution_end:
            self.backend.cut_graph(
                self.root_device
            )  # dispatches the execution, as XLAPrecision.optimizer_step does a step
        else:  # nothing to dispatch: the seed advances as that sync would advance it, with no sync
            seed = compat.xla_seed_after_step(self.backend.rng_state(self.root_device))
            self.backend.set_rng_state(self.root_device, seed)
        return result

    @override
    def flush(self, materialize: bool = False) -> None:
        """Run the kept steps now: pending on the device, like any step, or with `materialize` run at once, for a
        checkpoint, whose writer reads tensor after tensor (each read of pending work would compile a graph)."""
        if not getattr(self, "_group", None):
            return
        k, n = self.steps_per_execution, len(self._group)
        program, pads = self._programs[self._signature]
        batches = self._group + pads[: k - n]
        rows = self._rows + [[0.0] * len(self._rows[0])] * (k - n)
        seeds = self._seeds + [0] * (k - n)
        new = program.run(self._state(), batches, n, rows, seeds, shard=self.shard_steps, shared=self._shared)
        self._store([self.place_state(t) for t in new], n)
        self._reset_group()
        if materialize:
            compat.xla_materialize(self._state())

    # --- the state a step reads and writes ------------------------------------------------------------------
    def _buffers(self) -> list[tuple[torch.nn.Module, str]]:
        return [
            (m, name)
            for m in self.lightning_module.modules()
            for name, b in m.named_buffers(recurse=False)
            if b is not None
        ]

    def _state_groups(self) -> dict[str, list[torch.Tensor]]:
        module = self.lightning_module
        return {
            "params": list(module.parameters()),
            "buffers": [getattr(m, name) for m, name in self._buffers()],
            "optimizer": self._opt.state(),
            "sums": list(module.step_state().values()),
        }

    def _state(self) -> list[torch.Tensor]:
        """What a step reads and writes, flat, in `_layout()`'s order: the program's state parameters."""
        return self._layout().join(**self._state_groups())

    def _layout(self) -> Layout:
        """The sizes of `_state_groups()`, counted without making any state."""
        n_params = len(list(self.lightning_module.parameters()))
        return Layout(
            params=n_params,
            buffers=len(self._buffers()),
            optimizer=n_params * len(self._opt.keys),
            sums=len(self.lightning_module.step_state()),
        )

    def _split(self, state: list) -> tuple[list, list, list, list]:
        g = self._layout().split(state)
        return g["params"], g["buffers"], g["optimizer"], g["sums"]

    def _step(self, state, batch, scalars) -> list[torch.Tensor]:
        """One training step as a pure function; traced once."""
        module = self.lightning_module
        params, buffers, opt_state, sums = self._split(list(state))
        names = list(module.step_state())
        places = self._buffers()
        clones = [b.clone() for b in buffers]  # the forward updates BatchNorm's buffers in place: let it, on copies
        for (m, name), c in zip(places, clones):
            setattr(m, name, c)
        module.load_step_state(dict(zip(names, sums)))
        try:
            with self.precision_plugin.train_step_context():
                loss = module.training_step(tuple(batch), 0)
            grads = torch.autograd.grad(loss, params)
            new_sums = list(module.step_state().values())
        finally:
            for (m, name), b in zip(places, buffers):
                setattr(m, name, b)
            module.load_step_state(dict(zip(names, sums)))
        new_params, new_opt = self._opt.update(params, grads, opt_state, scalars)
        return self._layout().join(params=new_params, buffers=clones, optimizer=new_opt, sums=new_sums)

    def _build(self, first: tuple, row: list[float]) -> bool:
        """Trace the step on `first` (a batch of this group's shapes) into a program; False where the trace read
        device values on the host and auto runs Lightning's own step from here on (a K set by hand: an error)."""
        state = self._state()
        if compat.xla_pending(state):  # after a group of other shapes ran: the trace needs device data
            compat.xla_materialize(state)
        scalars = torch.tensor(row, dtype=torch.float32).to(self.root_device)
        seed, reads = self.backend.rng_state(self.root_device), self.backend.counters()[2]
        program = StepProgram(self.steps_per_execution, self.execution_loop)
        program.build(self._step, state, first, scalars, self._shared)
        self.backend.set_rng_state(self.root_device, seed)  # the trace drew seeds that no step will use
        reads = self.backend.counters()[2] - reads
        if reads:
            self._traced_step_reads_host(reads)
            return False
        pads = [tuple(self.pad_like(t) for t in first) for _ in range(self.steps_per_execution - 1)]
        self._programs[self._signature] = (program, pads)
        return True

    def _traced_step_reads_host(self, reads: int) -> None:
        what = (
            f"the training step read device values on the host while traced ({reads} read(s): an .item(), a print, "
            f"a shape that depends on the data such as x[mask]), so a program of it would keep the first batch's"
        )
        if not self.auto_steps:
            raise ConfigError(f"steps_per_execution={self.steps_per_execution}: {what}; use steps_per_execution=1")
        self._one_step_at_a_time(f"{what}; Lightning traces it at every step")
        self._programs = {}
        self._reset_group()
        if self.is_global_zero:
            print(f"steps per execution: {self.grouping_note}", flush=True)

    def _store(self, new: list[torch.Tensor], steps: int) -> None:
        module = self.lightning_module
        params, buffers, opt_state, sums = self._split(list(new))
        with torch.no_grad():
            for p, t in zip(module.parameters(), params):
                p.copy_(t)
            for (m, name), t in zip(self._buffers(), buffers):
                getattr(m, name).copy_(t)
        self._opt.store(opt_state, steps)
        module.load_step_state(dict(zip(module.step_state(), sums)))

    # --- what SPMD changes -----------------------------------------------------------------------------------
    def pad_like(self, t: torch.Tensor) -> torch.Tensor:
        """A padding batch tensor for the unused steps of a short group: device data, sent as a loader sends a
        batch (`.to()` would make a 0-dim zero, a padding step number, a constant of the graph)."""
        return self.backend.to_device(torch.zeros(t.shape, dtype=t.dtype), t.device)

    def shard_steps(self, stacked: torch.Tensor) -> torch.Tensor:
        """Place K stacked batches (one device: as they are)."""
        return stacked

    def place_state(self, t: torch.Tensor) -> torch.Tensor:
        """Place one state tensor the program returns (one device: as it is)."""
        return t
