"""What the strategies of both runtimes share where K training steps run as one program: Lightning still counts
single steps, so a strategy keeps each step's batch and runs the group when it is full or when the state must be
true (the end of an epoch or of max_steps, a checkpoint, validation); the optimizer's update and the gradient run
inside the program, so Lightning's backward and step do nothing. Each runtime says how a group runs (`flush`)."""

from __future__ import annotations

from typing_extensions import override

from xla_train.errors import ConfigError
from xla_train.runtime.functional_optimizer import FunctionalOptimizer


class GroupedSteps:
    """For a Lightning strategy whose steps run as programs of K (runtime/steps_per_execution.py for torch_xla,
    runtime/engine/jax/strategy.py for JAX)."""

    steps_per_execution = 1
    execution_loop = "unroll"  # or "while"; runtime/plan.py resolves auto
    auto_steps = False  # steps_per_execution=auto: where this run cannot group steps, one at a time, not an error
    trace_once = False  # auto: K=1 still runs as a program traced once, a group of one, not traced at every step
    auto_pending = False  # auto, and the run's length still decides K (unrolled steps: fit_to_run)
    grouping_note = ""  # what auto chose, and why (the run report prints it)
    grouping_what = "steps_per_execution>1"  # what runs the update inside a program, in an error's words
    _group: list | tuple = ()  # the kept steps of the group in progress

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

    def fit_to_run(self, steps: int, run_steps: float | None = None) -> None:
        """K against the run: where auto still waits for the run's length (`run_steps` training steps in all), the
        backend's payback rule decides it; then against an epoch of `steps` training steps, auto's K shrinks to the
        epoch (one execution each) and a K the user set that is longer is refused. The CLI asks before any run
        folder exists, and the benchmarks before their cells' steps; on_train_start asks for runs built elsewhere."""
        if self.auto_pending and run_steps is not None:
            k, self.grouping_note, self.auto_pending = self.backend.auto_steps(self.execution_loop, run_steps)
            self.steps_per_execution = k
        if not self._grouping or self.steps_per_execution <= steps:
            return
        if not self.auto_steps:
            raise ConfigError(
                f"steps_per_execution={self.steps_per_execution} is more than the {steps} training steps of an "
                f"epoch; use at most {steps}"
            )
        self.steps_per_execution = max(1, int(steps))
        self.grouping_note = f"{self.steps_per_execution} (auto: the steps of an epoch)"

    def group_ends_at(self, batch_idx: int) -> bool:
        """Whether the step of `batch_idx` must end its group: K are kept, or the epoch or max_steps ends here."""
        trainer = self.lightning_module.trainer
        last = batch_idx + 1 >= trainer.num_training_batches or 0 < trainer.max_steps <= trainer.global_step + 1
        return len(self._group) == self.steps_per_execution or last

    def flush(self, materialize: bool = False) -> None:
        """Run the kept steps now; with `materialize`, so that the torch module and optimizer hold their result."""
        raise NotImplementedError

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        trainer = self.lightning_module.trainer
        self.fit_to_run(trainer.num_training_batches, trainer.estimated_stepping_batches)

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
