"""`steps_per_execution=K` on the XLA strategies: Lightning still sees every step; XLA runs K at once.

Lightning's loop, callbacks, scheduler, checkpoints and resume all count single steps, so the strategy keeps each
batch with its learning rate and device seed and runs every K as one program (runtime/step_program.py). The
optimizer update must be inside that program, so Adam and SGD are written here as torch.optim computes them, on
the optimizer's own state, and a checkpoint does not show which K wrote it. A group runs early, with the steps it
has, whenever the state must be true: at the end of an epoch or of max_steps, before a checkpoint, before
validation (docs/feeding.md, "Keep a TPU fed").
"""

from __future__ import annotations

import torch
from typing_extensions import override

from xla_train import compat
from xla_train.errors import ConfigError
from xla_train.runtime.backend import backend_of, xla
from xla_train.runtime.step_program import Layout, StepProgram


class FunctionalOptimizer:
    """torch.optim.Adam or SGD as a pure function of (params, grads, state, per-step scalars), computed as torch 2.9.0
    computes them (its foreach form computes the same); tests/test_functional_optimizer.py holds it to torch.optim."""

    # What update() computes, per optimizer: the options it reads, and the settings it cannot compute.
    REFUSED = {
        torch.optim.Adam: {"amsgrad": False, "maximize": False, "decoupled_weight_decay": False},
        torch.optim.SGD: {"dampening": 0, "maximize": False},
    }

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        name = type(optimizer).__name__
        accepted = (
            "steps_per_execution>1 runs Adam (without amsgrad, maximize or decoupled_weight_decay) or SGD "
            "(without dampening or maximize), with one parameter group, inside the XLA program"
        )
        if type(optimizer) not in self.REFUSED:
            raise ConfigError(f"{accepted}; this run's optimizer is {name}")
        if len(optimizer.param_groups) != 1:
            raise ConfigError(f"{accepted}; this run's {name} has {len(optimizer.param_groups)} parameter groups")
        g = optimizer.param_groups[0]
        off = [f"{k}={g.get(k)}" for k, plain in self.REFUSED[type(optimizer)].items() if g.get(k, plain) != plain]
        if off:
            raise ConfigError(f"{accepted}; this run's {name} has {', '.join(off)}")
        self.optimizer, self.group = optimizer, g
        if type(optimizer) is torch.optim.Adam:
            self.kind, self.keys = "adam", ("exp_avg", "exp_avg_sq")
        else:
            self.kind, self.keys = "sgd", ("momentum_buffer",) if g["momentum"] else ()
        first = optimizer.state.get(g["params"][0], {})
        self.steps_done = int(first["step"]) if "step" in first else 0  # torch keeps Adam's count on the CPU

    def state(self) -> list[torch.Tensor]:
        """Its state tensors, param by param; zeros (sent from the host: no graph) before the first step."""
        out = []
        for p in self.group["params"]:
            s = self.optimizer.state[p]
            out += [s[k] if k in s else torch.zeros(p.shape, dtype=p.dtype).to(p.device) for k in self.keys]
        return out

    def scalars(self, t: int) -> list[float]:
        """What step t (1-based) needs from the host, computed there in float64 as torch does."""
        g = self.group
        if self.kind == "sgd":
            return [-g["lr"]]
        b1, b2 = g["betas"]
        return [-g["lr"] / (1 - b1**t), (1 - b2**t) ** 0.5]

    def update(self, params, grads, state, scalars) -> tuple[list, list]:
        g, n = self.group, len(self.keys)
        new_params, new_state = [], []
        for i, (p, grad) in enumerate(zip(params, grads)):
            if g["weight_decay"]:
                grad = grad.add(p, alpha=g["weight_decay"])
            s = state[i * n : (i + 1) * n]
            if self.kind == "adam":
                (b1, b2), (m, v) = g["betas"], s
                m = m.lerp(grad, 1 - b1)
                v = v.mul(b2).addcmul(grad, grad, value=1 - b2)
                denom = (v.sqrt() / scalars[1]).add(g["eps"])
                new_params.append(p.detach() + (m / denom) * scalars[0])  # torch: p.addcdiv_(m, denom, -step_size)
                new_state += [m, v]
                continue
            if n:
                buf = s[0].mul(g["momentum"]).add(grad)  # from zeros: torch's first-step clone of the gradient
                grad = grad.add(buf, alpha=g["momentum"]) if g["nesterov"] else buf
                new_state.append(buf)
            new_params.append(p.detach() + grad * scalars[0])
        return new_params, new_state

    def store(self, new_state: list[torch.Tensor], steps: int) -> None:
        self.steps_done += steps
        n = len(self.keys)
        for i, p in enumerate(self.group["params"]):
            s = self.optimizer.state[p]
            s.update(zip(self.keys, new_state[i * n : (i + 1) * n]))
            if self.kind == "adam":
                s["step"] = torch.tensor(float(self.steps_done))
        compat.mark_optimizer_stepped(self.optimizer)


class StepsPerExecution:
    """For the XLA strategies: with steps_per_execution > 1, batches are kept and run K at a time."""

    steps_per_execution = 1
    execution_loop = "unroll"  # or "while" (runtime/step_program.py); runtime/plan.py resolves auto
    auto_steps = False  # steps_per_execution=auto: where this run cannot group steps, one at a time, not an error
    auto_pending = False  # auto, and the run's length still decides K (unrolled steps: fit_to_run)
    grouping_note = ""  # what auto chose, and why (the run report prints it)

    @property
    def _backend(self):
        return backend_of(self.root_device)

    def _reset_group(self) -> None:
        self._group, self._rows, self._seeds, self._shared = [], [], [], []

    @property
    def _grouping(self) -> bool:
        return self.steps_per_execution > 1

    @override
    def setup(self, trainer) -> None:
        super().setup(trainer)
        self._reset_group()
        self._program, self._opt, self._pads = None, None, []
        if not self._grouping or trainer.state.fn != "fit":
            return
        try:
            if trainer.accumulate_grad_batches != 1 or trainer.gradient_clip_val:
                raise ConfigError(
                    "steps_per_execution>1 cannot be combined with accumulate_grad_batches or "
                    "gradient_clip_val (the optimizer update runs inside the XLA program)"
                )
            if not all(p.requires_grad for p in self.lightning_module.parameters()):
                raise ConfigError("steps_per_execution>1 needs every parameter trainable")
            if len(self.optimizers) != 1:
                raise ConfigError("steps_per_execution>1 runs one optimizer inside the XLA program")
            FunctionalOptimizer(self.optimizers[0])  # refuses what it cannot run; built at the first step, after
            # a resume has restored the optimizer's state
        except ConfigError as e:
            if not self.auto_steps:
                raise
            self.steps_per_execution, self.grouping_note, self.auto_pending = 1, f"1 (auto: {e})", False

    def fit_to_run(self, steps: int, run_steps: float | None = None) -> None:
        """K against the run: where auto still waits for the run's length (`run_steps` training steps in all), the
        backend's payback rule decides it; then against an epoch of `steps` training steps, auto's K shrinks to the
        epoch (one execution each) and a K the user set that is longer is refused. The CLI asks before any run
        folder exists, and the benchmarks before their cells' steps; on_train_start asks for runs built elsewhere."""
        if self.auto_pending and run_steps is not None:
            k, self.grouping_note, self.auto_pending = xla().auto_steps(self.execution_loop, run_steps)
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

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        trainer = self.lightning_module.trainer
        self.fit_to_run(trainer.num_training_batches, trainer.estimated_stepping_batches)

    @override
    def training_step(self, *args, **kwargs):
        if not self._grouping:
            return super().training_step(*args, **kwargs)
        batch, batch_idx = args[0], args[1]
        trainer = self.lightning_module.trainer
        if self._opt is None:
            self._opt = FunctionalOptimizer(trainer.optimizers[0])
        if not self._group:  # what the group's steps read besides their batches: the epoch's order, at most
            self._shared = self.lightning_module.execution_inputs()
        self._group.append(tuple(batch))
        self._rows.append(self._opt.scalars(self._opt.steps_done + len(self._group)))
        self._seeds.append(self._backend.rng_state(self.root_device))  # the seed this step would have traced with
        last = batch_idx + 1 >= trainer.num_training_batches or 0 < trainer.max_steps <= trainer.global_step + 1
        if len(self._group) == self.steps_per_execution or last:
            self.flush()
        return torch.tensor(float("nan"))  # the loss of a single step is not read back: it stays on the device

    @property
    def at_execution_end(self) -> bool:
        """Whether the last training step ended an execution (always, one step at a time): where the hosts of a
        pod agree whether to stop, once per execution (training/resume.py)."""
        return not (self._grouping and getattr(self, "_group", None))

    @override
    def backward(self, closure_loss, optimizer, *args, **kwargs):
        if not self._grouping:
            return super().backward(closure_loss, optimizer, *args, **kwargs)
        return closure_loss  # the gradient is taken inside the program

    @override
    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        if not self._grouping:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        result = closure()  # the training step: keeps the batch, and runs the group when it is full
        if self.at_execution_end:
            self._backend.cut_graph(
                self.root_device
            )  # dispatches the execution, as XLAPrecision.optimizer_step does a step
        else:  # nothing to dispatch: the seed advances as that sync would advance it, with no sync
            seed = compat.xla_seed_after_step(self._backend.rng_state(self.root_device))
            self._backend.set_rng_state(self.root_device, seed)
        return result

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

    def flush(self, materialize: bool = False) -> None:
        """Run the kept steps now: pending on the device, like any step, or with `materialize` run at once, for a
        checkpoint, whose writer reads tensor after tensor (each read of pending work would compile a graph)."""
        if not getattr(self, "_group", None):
            return
        k, n = self.steps_per_execution, len(self._group)
        if self._program is None:
            self._build()
        batches = self._group + self._pads[: k - n]
        rows = self._rows + [[0.0] * len(self._rows[0])] * (k - n)
        seeds = self._seeds + [0] * (k - n)
        new = self._program.run(self._state(), batches, n, rows, seeds, shard=self.shard_steps, shared=self._shared)
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

    def _build(self) -> None:
        first = self._group[0]
        self._pads = [tuple(self.pad_like(t) for t in first) for _ in range(self.steps_per_execution - 1)]
        state = self._state()
        scalars = torch.tensor(self._rows[0], dtype=torch.float32).to(self.root_device)
        seed = self._backend.rng_state(self.root_device)
        self._program = StepProgram(self.steps_per_execution, self.execution_loop)
        self._program.build(self._step, state, first, scalars, self._shared)
        self._backend.set_rng_state(self.root_device, seed)  # the trace drew seeds that no step will use

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
        return self._backend.to_device(torch.zeros(t.shape, dtype=t.dtype), t.device)

    def shard_steps(self, stacked: torch.Tensor) -> torch.Tensor:
        """Place K stacked batches (one device: as they are)."""
        return stacked

    def place_state(self, t: torch.Tensor) -> torch.Tensor:
        """Place one state tensor the program returns (one device: as it is)."""
        return t
