"""What the Lightning strategies of both runtimes share where K training steps run as one program.

Lightning's loop, callbacks, scheduler, checkpoints and resume all count single steps, so the strategy keeps each
step's batch with its learning-rate row and its random key, and hands every K to its engine (runtime/
interface.py) to run as one program traced once, the optimizer's update inside; auto's K=1 is such a program too.
A group runs early, with the steps it has, whenever the state must be true: at the end of an epoch or of max_steps,
before a checkpoint, before validation (docs/feeding.md, "Keep a TPU fed"). The gradient and the update run inside the
program, so Lightning's backward and optimizer step do nothing for a kept step.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn
from typing_extensions import override

from xla_train.errors import ConfigError
from xla_train.runtime.functional_optimizer import FunctionalOptimizer
from xla_train.runtime.grouping import Grouping, GroupingSettings, decide


def no_loss() -> torch.Tensor:
    """What a kept step gives Lightning as its loss where it has none to give: no element, so no number that
    could pass for a loss (a NaN looked like a diverged run). Its step runs when its group does, so its loss is not
    computed yet; and the step that ends a group gets none where its engine would have to read the loss on the
    host to give it (docs/feeding.md, "Steps per execution"). Not None: Lightning refuses a None step on several
    hosts, and a callback's outputs["loss"] would not be there."""
    return torch.empty(0)


class GroupedSteps:
    """For a Lightning strategy whose steps its engine runs as programs of K (`self.engine`: torch_xla's
    runtime/torch_xla/strategy.py, JAX's runtime/jax/strategy.py)."""

    engine = None  # the runtime's Engine (runtime/interface.py)
    fallback = True  # whether a step that cannot be a program can run as Lightning's own step (auto's K=1)
    always_traced = False  # every step is the engine's program, K=1 set by hand too (JAX's: no Lightning step)

    grouping: Grouping = Grouping()  # K and the loop as decided so far (runtime/grouping.py, decide)
    grouping_settings = GroupingSettings(1, "unroll")
    host_platform = False  # XLA:CPU, where the net decides execution_loop=auto
    scan_chunk: int | None = None  # the scan's time steps per loop iteration, as set (None: the runtime's)
    fell_back = ""  # auto, and this run's steps cannot be a program: why it runs one step at a time
    grouping_what = "steps_per_execution>1"  # what runs the update inside a program, in an error's words
    _known: tuple = (None, None, None)  # the net, the run's training steps and an epoch's, as far as known
    _group: list | tuple = ()  # the kept steps of the group in progress: (batch, row, key)
    _signature = None  # the shapes and dtypes of the group's batches

    def plan_grouping(
        self, settings: GroupingSettings, host_platform: bool = False, scan_chunk: int | None = None
    ) -> None:
        """The run's settings and platform, decided on as the run is planned (nothing known yet of the net or the
        run's length); scan_chunk: the setting, where the user gave one."""
        self.grouping_settings, self.host_platform, self.scan_chunk = settings, host_platform, scan_chunk
        self.fell_back, self._known = "", (None, None, None)
        self._decide()

    def _decide(self) -> None:
        if self.fell_back:
            return
        self.grouping = decide(self.grouping_settings, self.host_platform, *self._known)
        if self.engine is not None:
            self.engine.loop = self.grouping.loop

    @property
    def steps_per_execution(self) -> int:
        return self.grouping.k

    @property
    def execution_loop(self) -> str:
        return self.grouping.loop

    @property
    def trace_once(self) -> bool:
        """auto: K=1 still runs as a program traced once, a group of one, not traced at every step."""
        return self.always_traced or (self.grouping.auto and not self.fell_back)

    @property
    def backend(self):
        """The runtime's Backend (runtime/backend.py): its payback rule for auto's K, its device RNG."""
        raise NotImplementedError

    @property
    def _grouping(self) -> bool:
        """Whether steps run through the traced-once program; a K=1 the user set is Lightning's own step."""
        return self.steps_per_execution > 1 or self.trace_once

    def check_groupable(self, trainer) -> None:
        """What a program of steps cannot run, refused in one line (ConfigError)."""
        what = self.grouping_what
        if trainer.accumulate_grad_batches != 1 or trainer.gradient_clip_val:
            raise ConfigError(
                f"{what} cannot be combined with accumulate_grad_batches or gradient_clip_val (the optimizer update "
                f"runs inside the XLA program)"
            )
        if not all(p.requires_grad for p in self.lightning_module.parameters()):
            raise ConfigError(f"{what} needs every parameter trainable")
        if len(self.optimizers) != 1:
            raise ConfigError(f"{what} runs one optimizer inside the XLA program")
        FunctionalOptimizer(self.optimizers[0])  # refuses what it cannot run; built at the first step, after a
        # resume has restored the optimizer's state

    def fit_to_run(self, steps: int, run_steps: float | None = None, module: nn.Module | None = None) -> None:
        """Decide again with what is known now: the net (`module`), the run's training steps (`run_steps`), and an
        epoch's (`steps`); what is not given stays as known before. The CLI asks before any run folder exists, and the
        benchmarks before their cells' steps; on_train_start asks for runs built elsewhere."""
        net, run, _ = self._known
        self._known = (module if module is not None else net, run_steps if run_steps is not None else run, steps)
        self._decide()

    def group_ends_at(self, batch_idx: int) -> bool:
        """Whether the step of `batch_idx` must end its group: K are kept, or the epoch or max_steps ends here."""
        trainer = self.lightning_module.trainer
        last = batch_idx + 1 >= trainer.num_training_batches or 0 < trainer.max_steps <= trainer.global_step + 1
        return len(self._group) == self.steps_per_execution or last

    def flush(self, materialize: bool = False) -> None:
        """Run the kept steps now; with `materialize`, so that the torch module and optimizer hold their result."""
        if self._group:
            group, self._group = self._group, []
            batches, rows, keys = ([g[i] for g in group] for i in range(3))
            self.engine.train(batches, rows, keys, self.steps_per_execution)
        if materialize and self.engine is not None:
            self.engine.to_torch()

    @override
    def setup(self, trainer) -> None:
        super().setup(trainer)
        self._group, self._signature = [], None
        if not self._grouping or trainer.state.fn != "fit":
            return
        try:
            self.check_groupable(trainer)
        except ConfigError as e:
            if not (self.grouping.auto and self.fallback):
                raise
            self._one_step_at_a_time(str(e))

    def _one_step_at_a_time(self, why: str) -> None:
        """auto, where this run's steps cannot be a program: Lightning's own step, and the report says why."""
        self.grouping = replace(self.grouping, k=1, note=f"1 (auto: {why})", pending=False)
        self.fell_back = why

    @override
    def training_step(self, *args, **kwargs):
        if not self._grouping:
            return super().training_step(*args, **kwargs)
        batch, batch_idx = tuple(args[0]), args[1]
        trainer = self.lightning_module.trainer
        opt = self.engine.optimizer(trainer.optimizers[0])
        signature = tuple((tuple(t.shape), t.dtype) for t in batch)
        if self._group and signature != self._signature:  # a batch of new shapes: its own group and program
            self.flush()
        row = opt.scalars(opt.steps_done + len(self._group) + 1)
        if not self._group:
            self._signature = signature
            reads = self.engine.start_group(batch, row, self.steps_per_execution)
            if reads:
                self._traced_step_reads_host(reads)
                return super().training_step(*args, **kwargs)  # auto, and the step cannot be a program
        # global_step already counts the group's kept steps (each marks its optimizer stepped): this step's number
        self._group.append((batch, row, self.engine.step_key(trainer.global_step)))
        if not self.group_ends_at(batch_idx):
            return no_loss()
        self.flush()
        # the finite-loss check reads each execution's sums where K>1 (training/finite_loss.py)
        loss = self.engine.step_loss(read=self.steps_per_execution > 1)
        return no_loss() if loss is None else loss

    def _traced_step_reads_host(self, reads: int) -> None:
        what = (
            f"the training step read device values on the host while traced ({reads} read(s): an .item(), a print, "
            f"a shape that depends on the data such as x[mask]), so a program of it would keep the first batch's"
        )
        if not (self.grouping.auto and self.fallback):
            raise ConfigError(f"steps_per_execution={self.steps_per_execution}: {what}; use steps_per_execution=1")
        self._one_step_at_a_time(f"{what}; Lightning traces it at every step")
        self._group = []
        if self.is_global_zero:
            print(f"steps per execution: {self.grouping.note}", flush=True)

    @override
    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        if not self._grouping:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        result = closure()  # the training step: keeps the batch, and runs the group when it is full
        if not self._grouping:  # its trace read the host, so it ran as Lightning's own step (its gradients are set)
            return super().optimizer_step(optimizer, lambda: result, model, **kwargs)
        self.engine.after_step(optimizer, self.at_execution_end)
        return result

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        trainer = self.lightning_module.trainer
        self.fit_to_run(trainer.num_training_batches, trainer.estimated_stepping_batches, self.lightning_module)

    @property
    def at_execution_end(self) -> bool:
        """Whether the last training step ended an execution (always, one step at a time): where the hosts of a
        pod agree whether to stop, once per execution (training/resume.py)."""
        return not (self._grouping and self._group)

    @override
    def backward(self, closure_loss, optimizer, *args, **kwargs):
        if not self._grouping:
            return super().backward(closure_loss, optimizer, *args, **kwargs)
        return closure_loss  # the gradient is taken inside the program

    @override
    def lightning_module_state_dict(self):
        self.flush(materialize=True)  # a checkpoint holds every step Lightning has counted
        return super().lightning_module_state_dict()

    @override
    def optimizer_state(self, optimizer):
        self.flush(materialize=True)
        return super().optimizer_state(optimizer)

    @override
    def on_validation_start(self) -> None:
        self.flush()
        super().on_validation_start()

    @override
    def on_train_end(self) -> None:
        self.flush()
        super().on_train_end()
