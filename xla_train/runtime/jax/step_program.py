"""A LightningModule's steps as pure functions of JAX arrays: what the JAX engine jits (runtime/jax/engine.py).

jax.jit traces a pure function once, so each step is one: the module's own `training_step` (or an evaluation step)
run by torch.func.functional_call on torchax views of the arrays it is handed, differentiated by jax.value_and_grad
and updated by FunctionalOptimizer, so it computes what the torch_xla engine does. K steps are one function over the
K stacked batches: unrolled, or a While loop over the real steps. Each step draws its random numbers from the run's
key folded with the step's number, an input, so dropout changes every step and a resumed run draws the same masks.
Where the arrays live and when the programs run is the engine's; this file holds no state of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings

import torch
from torch import nn

from xla_train.errors import ConfigError
from xla_train.runtime.functional_optimizer import FunctionalOptimizer
from xla_train.runtime.interface import StepModule
from xla_train.runtime.jax import compat


class _Hook(nn.Module):
    """functional_call's module: calls the named method of the wrapped module with the state it was given."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, method: str, *args):
        return getattr(self.module, method)(*args)


class StepProgram:
    """One module's steps, traced in torchax's environment `env`: bf16 where `autocast` is set, matmuls at JAX's
    `matmul_precision` (None: the default). `opt`, the functional optimizer the training step updates with, is the
    engine's to set when it takes one."""

    def __init__(self, module: StepModule, env, autocast: str | None, matmul_precision: str | None) -> None:
        self.module, self.env, self.autocast, self.matmul_precision = module, env, autocast, matmul_precision
        self._hook = _Hook(module)
        self._params = [n for n, _ in module.named_parameters()]
        self._buffers = [n for n, _ in module.named_buffers()]
        self.opt: FunctionalOptimizer | None = None

    @contextlib.contextmanager
    def torch_context(self, key=None, train: bool = True):
        """Torch code on torchax views: the module in train or eval mode, random ops drawing from `key`, bf16 where
        asked, and the module's mode and sums as they were afterwards."""
        import jax

        module = self.module
        was_training = module.training
        module.train(train)
        with contextlib.ExitStack() as stack:
            stack.enter_context(compat.host_tensors_as_constants())
            # Lightning evaluates under inference_mode, where torch hands composite ops (aten::batch_norm) to
            # torchax undecomposed, and torchax lowers only their parts.
            stack.enter_context(torch.inference_mode(False))
            stack.enter_context(self.env)
            stack.enter_context(warnings.catch_warnings())
            # int64 (ids, labels, .long()) is int32 in JAX unless x64 is on: what torch's int64 holds here fits
            warnings.filterwarnings("ignore", message="Explicitly requested dtype int64")
            if key is not None:
                stack.enter_context(compat.with_prng(self.env, key))
            if self.autocast is not None:  # a torch dtype: torchax casts with Tensor.to
                stack.enter_context(compat.with_autocast(self.env, torch.bfloat16))
            if self.matmul_precision is not None:
                stack.enter_context(jax.default_matmul_precision(self.matmul_precision))
            try:
                yield
            finally:
                module.train(was_training)

    def call(self, method: str, params, buffers, *args):
        """module.<method>(*args) with `params` and `buffers` (torchax tensors) in place of its own."""
        state = {f"module.{n}": t for n, t in itertools.chain(zip(self._params, params), zip(self._buffers, buffers))}
        return torch.func.functional_call(self._hook, state, (method, *args), strict=True)

    def train_step(self, state: dict, batch, scalars, step, key0, resident):
        """One training step, a pure function of its arrays."""
        import jax
        from torchax.interop import jax_view, torch_view

        key = jax.random.fold_in(jax.random.wrap_key_data(key0), step)

        def loss_of(params):
            with self.torch_context(key, train=True):
                buffers = list(torch_view(state["buffers"]))
                self.module.load_step_state({"train": torch_view(state["sums"]["train"])})
                with self.module.reading(torch_view(resident)):
                    loss = self.call("training_step", torch_view(params), buffers, tuple(torch_view(batch)), 0)
                sums = self.module.step_state("train")["train"]
                return jax_view(loss), (jax_view(buffers), jax_view(sums))

        (loss, (buffers, sums)), grads = jax.value_and_grad(loss_of, has_aux=True)(state["params"])
        with self.torch_context(key, train=True):
            params, opt = self.opt.update(
                list(torch_view(state["params"])),
                list(torch_view(grads)),
                list(torch_view(state["opt"])),
                torch_view(scalars),
            )
        new = {"params": jax_view(params), "buffers": buffers, "opt": jax_view(opt), "sums": {"train": sums}}
        return {**new, "loss": loss.astype("float32")}

    def train_steps(self, state: dict, batches, scalars, steps, n, key0, resident, *, loop: str):
        """The first n of K steps (the rest are padding), as one program; `loop`: how ("unroll" or "while")."""
        import jax
        import jax.numpy as jnp

        k = steps.shape[0]
        if k == 1:
            return self.train_step(state, [b[0] for b in batches], scalars[0], steps[0], key0, resident)

        xs = (list(batches), scalars, steps)
        if loop == "while":  # a While loop over the n real steps: the padding runs no step

            def step_i(i, carry):
                batch, row, step = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), xs)
                return self.train_step(carry, batch, row, step, key0, resident)

            return jax.lax.fori_loop(0, n, step_i, state)

        def body(carry, xs):  # unrolled: a step past the real ones leaves the state as it was
            i, batch, row, step = xs
            new = self.train_step(carry, batch, row, step, key0, resident)
            return jax.tree.map(lambda a, b: jnp.where(i < n, a, b), new, carry), None

        state, _ = jax.lax.scan(body, state, (jnp.arange(k), *xs), unroll=k)
        return state

    def eval_step(self, method: str, stage: str, params, buffers, sums, batch, resident):
        """An evaluation step (`stage` "" for predict_step, which keeps no sums): its outputs and the new sums."""
        from torchax.interop import jax_view, torch_view

        with self.torch_context(train=False), self.module.reading(torch_view(resident)):
            if stage:
                self.module.load_step_state({stage: torch_view(sums)})
            out = self.call(method, torch_view(params), list(torch_view(buffers)), tuple(torch_view(batch)), 0)
            new = self.module.step_state(stage)[stage] if stage else None
            return jax_view(out), (jax_view(new) if new is not None else sums)


@contextlib.contextmanager
def untraceable_refused():
    """Around a program's call, where jit traces it: a step with an op torchax cannot lower, or one that reads a
    traced value on the host, is one line naming what to change."""
    import jax
    from torchax.tensor import OperatorNotFound

    try:
        yield
    except (OperatorNotFound, NotImplementedError) as e:
        raise ConfigError(
            f"runtime=jax: torchax cannot run an op of this net ({str(e).strip().splitlines()[0][:160]}); "
            f"use runtime=torch_xla"
        ) from None
    except (
        jax.errors.ConcretizationTypeError,  # TracerBoolConversionError among them
        jax.errors.NonConcreteBooleanIndexError,
        jax.errors.TracerArrayConversionError,
        jax.errors.TracerIntegerConversionError,
    ) as e:
        raise ConfigError(
            "runtime=jax: the step reads a device value on the host while traced (an .item(), a Python branch "
            "on a tensor, or a shape that depends on the data such as x[mask]), which a compiled program cannot "
            f"do ({type(e).__name__}); keep shapes fixed, or use runtime=torch_xla"
        ) from None
