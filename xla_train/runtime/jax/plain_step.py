"""`bench overhead`'s hand-written training step on JAX: what a torchax user writes without Lightning, to set beside
xla_train's path through Lightning and the engine.

One jitted function of (state, batch, learning-rate row, step number): the net's loss through torch.func.functional_call
on torchax views, jax.value_and_grad, and the optimizer's update as a pure function, its state donated. It runs in the
engine's tracing context (its step program's op fixes and autocast, its compiler options, the key folded with the
step's number), and with the layer rewrites JAX's strategy swaps in, so that both sides compute the same step; what it
leaves out is Lightning's loop and hooks and the engine's epoch sums and K-step stacking.
"""

from __future__ import annotations

import numpy as np
import torch

from xla_train.runtime.functional_optimizer import FunctionalOptimizer
from xla_train.runtime.jax.backend import COUNTS
from xla_train.runtime.jax.engine import JaxEngine
from xla_train.runtime.jax.placement import host_array


class PlainStep:
    """Training steps of `net` under `loss(outputs, labels)`, its batches made inputs by `inputs` (data/batching.py),
    on the engine's first device. The state lives in `engine.state`, so the strategy's backend, which holds the engine,
    waits for it as for the engine's own."""

    def __init__(self, engine: JaxEngine, net: torch.nn.Module, optimizer, inputs, loss, seed: int) -> None:

        self.engine, self.inputs, self.loss = engine, inputs, loss
        self.device = engine.devices[0]
        engine.bind(net, seed)
        self.opt = FunctionalOptimizer(optimizer)
        opt_state = [torch.zeros(p.shape, dtype=p.dtype) for p in self.opt.group["params"] for _ in self.opt.keys]
        engine.state = {
            "params": self._put(p for p in net.parameters()),
            "buffers": self._put(net.buffers()),
            "opt": self._put(opt_state),
        }
        self._resident: dict = {}
        COUNTS.listen()

    def _put(self, tensors) -> list:
        import jax

        return [jax.device_put(host_array(t), self.device) for t in tensors]

    def resident_inputs(self) -> dict:
        """The data held on the device (the tables, the epoch's order): each array uploaded once."""
        import jax

        for name, (array, _) in self.inputs.program_inputs(True).items():
            if self._resident.get(name, (None,))[0] is not array:
                self._resident[name] = (array, jax.device_put(host_array(torch.from_numpy(np.asarray(array)))))
        return {name: placed for name, (_, placed) in self._resident.items()}

    def _step(self, state: dict, batch, scalars, step, key0, resident):
        import jax
        from torchax.interop import jax_view, torch_view

        engine, key = self.engine, jax.random.fold_in(key0, step)

        def loss_of(params):
            with engine.program.torch_context(key, train=True):
                buffers = list(torch_view(state["buffers"]))
                with self.inputs.reading(torch_view(resident)):
                    x, y = self.inputs(tuple(torch_view(batch)), "train", train=True)
                    loss = self.loss(engine.program.call("forward", torch_view(params), buffers, x), y)
                return jax_view(loss), jax_view(buffers)

        (loss, buffers), grads = jax.value_and_grad(loss_of, has_aux=True)(state["params"])
        with engine.program.torch_context(key, train=True):
            params, opt = self.opt.update(
                list(torch_view(state["params"])),
                list(torch_view(grads)),
                list(torch_view(state["opt"])),
                torch_view(scalars),
            )
        return loss, {"params": jax_view(params), "buffers": buffers, "opt": jax_view(opt)}

    def __call__(self, batch, step: int):
        """Step `step` (0-based) on a loaded batch, dispatched; returns its loss, a JAX array still on the device."""
        import jax

        engine = self.engine
        args = (
            engine.state,
            [jax.device_put(host_array(t), self.device) for t in batch],
            jax.device_put(np.asarray(self.opt.scalars(step + 1), dtype=np.float32), self.device),
            jax.device_put(np.int32(step), self.device),
            engine._key,
            self.resident_inputs(),
        )
        loss, engine.state = engine._execute("plain_step", self._step, *args, donate_argnums=(0,))
        return loss

    def close(self) -> None:
        """Nothing is held beyond the engine's state, which the strategy's teardown lets go."""
