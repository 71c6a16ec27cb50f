"""The engine on torch_xla: the model placed on an XLA device with the layer rewrites XLA needs, and K training steps
traced once into one program (runtime/torch_xla/step_program.py), its optimizer update inside
(runtime/functional_optimizer.py).

Tracing a step in Python can cost the host more than the step costs a TPU, so a step is traced once, as a pure
function of the state, and each kept step brings its batch, its learning-rate row and the device seed it would have
traced with alone. A step that reads device values on the host while traced cannot be a program: its values would
be the first batch's. Where the program's inputs and outputs go (one device, or split over a mesh) is the
placement's: `OneDevice` here, the SPMD mesh's in runtime/torch_xla/spmd.py.
"""

from __future__ import annotations

import torch

from xla_train.runtime.torch_xla.backend import XLA
from xla_train.runtime.interface import Engine, StepModule
from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.runtime.torch_xla.step_program import Layout, StepProgram
from xla_train.runtime.functional_optimizer import FunctionalOptimizer


def layer_rewrites(chunk: int = 1):
    """What torch_xla hands the layer rewrites (runtime/layers/rewrites.py): its While-loop recurrence, nn.Linear's
    weight gradient in the weight's shape, and on XLA:CPU the reductions for max pooling and dropout with their
    positions as device data. `bench overhead`'s hand-written loop swaps in the same, so both sides run one graph."""
    from xla_train.runtime.layers.rewrites import Rewrites
    from xla_train.runtime.torch_xla.recurrence import torch_xla_recurrence

    return Rewrites(torch_xla_recurrence, chunk, True, XLA.platform() == "cpu", ("xla", XLA.to_device))


class OneDevice:
    """Where a program's tensors go on one XLA device: as they are."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def rows(self, rows: torch.Tensor) -> torch.Tensor:
        """A batch-like host tensor, placed as a loaded batch is (data/batching.py, the epoch's order)."""
        return rows.to(self.device)

    def pad_like(self, t: torch.Tensor) -> torch.Tensor:
        """A padding batch tensor for the unused steps of a short group: device data, sent as a loader sends a
        batch (`.to()` would make a 0-dim zero, a padding step number, a constant of the graph)."""
        return XLA.to_device(torch.zeros(t.shape, dtype=t.dtype), t.device)

    def shard_steps(self, stacked: torch.Tensor) -> torch.Tensor:
        """Place K stacked batches."""
        return stacked

    def place_state(self, t: torch.Tensor) -> torch.Tensor:
        """Place one state tensor the program returns."""
        return t


class TorchXlaEngine(Engine):
    """One LightningModule's training steps on torch_xla, placed by `placement` (OneDevice, or SPMD's mesh)."""

    def __init__(self, placement: OneDevice) -> None:
        self.placement = placement
        self.device = placement.device
        self.loop = "unroll"  # or "while": how K steps run in one program
        self.module: StepModule | None = None
        self._step_context = None
        self._swapped: dict = {}
        self.reset()

    @property
    def backend(self):
        return XLA

    def reset(self) -> None:
        """No program, no optimizer: the next group traces anew."""
        self._programs, self._opt, self._signature, self._shared, self._pending = {}, None, None, [], False
        self._loss = None  # the last step's loss, carried with the state (step_loss)

    def bind(self, module: StepModule, step_context, loop: str) -> None:
        """The LightningModule whose steps run, the context each traced step runs in (the precision plugin's), and
        how K steps run; at the strategy's setup."""
        self.module, self._step_context, self.loop = module, step_context, loop
        self.reset()

    # --- the model on the device -------------------------------------------------------------------------------
    def place_model(self, model: torch.nn.Module, move, chunk: int = 1) -> None:
        """`move` (Lightning's own model_to_device) with the layers XLA needs swapped in first.

        nn.LSTM, nn.GRU and nn.RNN would be unrolled over time on XLA, so scans run them as loops, with the same
        parameters, until `restore_model` gives the model its nn modules back for the CPU. nn.Linear layers compute
        their weight gradient in the weight's own shape (runtime/layers/linear_grad.py) until then too, and on XLA:CPU max
        pooling over tiling windows runs as a reduction (runtime/layers/max_pool.py) and dropout hashes its mask
        (runtime/layers/dropout.py).

        Its 0-dim buffers (BatchNorm's num_batches_tracked) go as data: `.to(device)` makes a scalar 0 or 1 an IR
        constant, which the loader's first sync then compiled as a graph of its own (no inputs, one output per
        buffer) at the first validation or training batch. So does the optimizer's state, made before the first
        step (`prime_optimizers`)."""
        import torch_xla.core.xla_model as xm

        from xla_train.runtime.layers import rewrites

        scalars = [
            (m, name, b)
            for m in model.modules()
            for name, b in m.named_buffers(recurse=False)
            if b.dim() == 0 and b.device.type == "cpu"
        ]
        self._swapped = rewrites.apply(model, layer_rewrites(chunk))  # {layer: its own class}, for restore_model
        move()
        if scalars:
            on_device = xm.send_cpu_data_to_device([b for _, _, b in scalars], self.device)
            for (module, name, _), tensor in zip(scalars, on_device):
                setattr(module, name, tensor)

    def prime_optimizers(self, optimizers) -> None:
        """Adam's and SGD's state made as data before the first step (runtime/torch_xla/optimizer_state.py), after any resume
        has restored its own: otherwise the first step compiles a program that no later step runs."""
        import torch_xla.core.xla_model as xm

        from xla_train.runtime.torch_xla.optimizer_state import prime_optimizer_state

        for optimizer in optimizers:
            prime_optimizer_state(optimizer, lambda ts: xm.send_cpu_data_to_device(ts, self.device))

    def restore_model(self, model: torch.nn.Module) -> None:
        """The nn modules back, where the CPU runs them (after Lightning moved the model to the CPU)."""
        from xla_train.runtime.layers import rewrites

        rewrites.undo(model, self._swapped)
        self._swapped = {}

    # --- a group of steps (runtime/interface.py) --------------------------------------------------------
    def optimizer(self, optimizer: torch.optim.Optimizer) -> FunctionalOptimizer:
        if self._opt is None:
            self._opt = FunctionalOptimizer(optimizer)
        return self._opt

    def start_group(self, batch: tuple, row, k: int) -> int:
        self._shared = self.module.execution_inputs()  # what the group's steps read besides their batches
        self._signature = tuple((tuple(t.shape), t.dtype) for t in batch)
        if self._signature in self._programs:
            return 0
        return self._build(batch, row, k)

    def step_key(self, step: int) -> int:
        return self.backend.rng_state(self.device)  # the seed this step would have traced with

    def train(self, batches, rows, keys, k: int) -> None:
        n = len(batches)
        program, pads = self._programs[self._signature]
        batches = list(batches) + pads[: k - n]
        rows = list(rows) + [[0.0] * len(rows[0])] * (k - n)
        seeds = list(keys) + [0] * (k - n)
        new = program.run(self._state(), batches, n, rows, seeds, shard=self.placement.shard_steps, shared=self._shared)
        self._store([self.placement.place_state(t) for t in new], n)
        self._pending = True

    def step_loss(self, read: bool) -> torch.Tensor:
        """A device tensor, as Lightning's own step on XLA returns: it is computed by the group's program, so a
        callback that reads it waits for that program and no other; nothing reads it otherwise."""
        return self._loss

    def after_step(self, optimizer, at_execution_end: bool) -> None:
        if at_execution_end:  # dispatches the execution, as XLAPrecision.optimizer_step does a step
            self.backend.cut_graph(self.device)
            self._pending = False
        else:  # nothing to dispatch: the seed advances as that sync would advance it, with no sync
            seed = xla_compat.xla_seed_after_step(self.backend.rng_state(self.device))
            self.backend.set_rng_state(self.device, seed)

    def to_torch(self) -> None:
        """Run the pending steps at once: the checkpoint's writer reads tensor after tensor, and each read of
        pending work would compile a graph."""
        if self._pending:
            self._pending = False
            xla_compat.xla_materialize(self._state())

    # --- the state a step reads and writes ---------------------------------------------------------------------
    def _buffers(self) -> list[tuple[torch.nn.Module, str]]:
        return [(m, name) for m in self.module.modules() for name, b in m.named_buffers(recurse=False) if b is not None]

    def _state(self) -> list[torch.Tensor]:
        """What a step reads and writes, flat, in `_layout()`'s order: the program's state parameters."""
        return self._layout().join(
            params=list(self.module.parameters()),
            buffers=[getattr(m, name) for m, name in self._buffers()],
            optimizer=self._opt.state(),
            sums=list(self.module.step_state().values()),
            loss=[self._loss_state()],
        )

    def _loss_state(self) -> torch.Tensor:
        """The last step's loss as state: float32 whatever the step computes in (a While loop's carry keeps its
        dtype), and device data before the first step, as a batch is sent (a 0 sent with `.to()` is a constant)."""
        if self._loss is None:
            self._loss = self.backend.to_device(torch.zeros((), dtype=torch.float32), self.device)
        return self._loss

    def _layout(self) -> Layout:
        """The sizes of `_state()`'s groups, counted without making any state."""
        n_params = len(list(self.module.parameters()))
        return Layout(
            params=n_params,
            buffers=len(self._buffers()),
            optimizer=n_params * len(self._opt.keys),
            sums=len(self.module.step_state()),
            loss=1,
        )

    def _split(self, state: list) -> tuple[list, list, list, list]:
        g = self._layout().split(state)
        return g["params"], g["buffers"], g["optimizer"], g["sums"]

    def _step(self, state, batch, scalars) -> list[torch.Tensor]:
        """One training step as a pure function; traced once."""
        module = self.module
        params, buffers, opt_state, sums = self._split(list(state))
        names = list(module.step_state())
        places = self._buffers()
        clones = [b.clone() for b in buffers]  # the forward updates BatchNorm's buffers in place: let it, on copies
        for (m, name), c in zip(places, clones):
            setattr(m, name, c)
        module.load_step_state(dict(zip(names, sums)))
        try:
            with self._step_context():
                loss = module.training_step(tuple(batch), 0)
            grads = torch.autograd.grad(loss, params)
            new_sums = list(module.step_state().values())
        finally:
            for (m, name), b in zip(places, buffers):
                setattr(m, name, b)
            module.load_step_state(dict(zip(names, sums)))
        new_params, new_opt = self._opt.update(params, grads, opt_state, scalars)
        loss = [loss.detach().to(torch.float32)]
        return self._layout().join(params=new_params, buffers=clones, optimizer=new_opt, sums=new_sums, loss=loss)

    def _build(self, first: tuple, row, k: int) -> int:
        """Trace the step on `first` (a batch of this group's shapes) into a program of k steps; the number of
        device values the trace read on the host (0: the program is kept)."""
        state = self._state()
        if xla_compat.xla_pending(state):  # after a group of other shapes ran: the trace needs device data
            xla_compat.xla_materialize(state)
        scalars = torch.tensor(row, dtype=torch.float32).to(self.device)
        seed, reads = self.backend.rng_state(self.device), self.backend.counters()[2]
        program = StepProgram(k, self.loop)
        program.build(self._step, state, first, scalars, self._shared)
        self.backend.set_rng_state(self.device, seed)  # the trace drew seeds that no step will use
        reads = self.backend.counters()[2] - reads
        if reads:
            self.reset()
            return reads
        pads = [tuple(self.placement.pad_like(t) for t in first) for _ in range(k - 1)]
        self._programs[self._signature] = (program, pads)
        return 0

    def _store(self, new: list[torch.Tensor], steps: int) -> None:
        module = self.module
        params, buffers, opt_state, sums = self._split(list(new))
        with torch.no_grad():
            for p, t in zip(module.parameters(), params):
                p.copy_(t)
            for (m, name), t in zip(self._buffers(), buffers):
                getattr(m, name).copy_(t)
        self._opt.store(opt_state, steps)
        module.load_step_state(dict(zip(module.step_state(), sums)))
        self._loss = self._layout().split(new)["loss"][0]
