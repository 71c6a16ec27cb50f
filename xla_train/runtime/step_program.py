"""K training steps as one XLA program, traced once: what `steps_per_execution=K` runs.

torch_xla traces the whole step in Python on every step, and for the seed
models that trace costs the host more than the step costs a TPU (docs/feeding.md,
"Keep a TPU fed"). Here one step is traced once, as a pure function from
(state, batch, per-step scalars) to the new state, and its HLO is kept. Each
execution then only stacks K batches and calls that HLO K times in one graph,
which the runtime finds in its cache: no tracing, one dispatch for K steps.

This is torch_xla's own `experimental.gradient_accumulation` technique (trace a
step with lazy tensors, take its HLO and graph inputs, wrap it with
xla_builder) carried to the whole step: forward, backward, optimizer update,
BatchNorm buffers and the on-device metric sums are all in the state. The K
calls run in one of two loops (`execution_loop`), chosen per backend
(runtime/plan.py):

- `while`: an XLA While loop over the one body, as gradient_accumulation
  builds it. The program, its compile time and its host memory do not grow
  with K, and the trip count is the number of real steps, so a remainder runs
  no padding steps.
- `unroll`: K calls in a row. XLA:CPU does not give a convolution inside a
  While body its fast layout (docs/feeding.md), so there this is the
  faster program; its compile time grows with K. The number of real steps is
  an input: steps past it leave the state as it was (a select per state
  tensor), so a remainder runs the same compiled program on padding.

Random numbers: the body's one seed input is fed, per step, the seed the
device would have had at that step without grouping (the caller records it),
so dropout draws what it would have drawn step by step.

Shared inputs are device tensors every step of an execution reads and that
change between executions (the epoch's order of device-resident data): they
are parameters of the program, passed once, not stacked. A tensor the step
reads that is none of its inputs becomes a constant of the program, the value
it had when traced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from xla_train import compat
from xla_train.runtime.device import device_data

MASK64 = (1 << 64) - 1
LOOPS = ("unroll", "while")


def signed64(seed: int) -> int:
    """A uint64 seed as the int64 an XLA seed tensor holds."""
    seed &= MASK64
    return seed - (1 << 64) if seed >= 1 << 63 else seed


class StepProgram:
    """`build` traces one step; `run` executes up to k of them as one graph and returns the new state."""

    def __init__(self, k: int, loop: str = "unroll") -> None:
        if loop not in LOOPS:
            raise ValueError(f"execution_loop={loop!r}; use one of {', '.join(LOOPS)}")
        self.k, self.loop = k, loop
        self.computation = None
        self._sources: list[tuple[str, int]] = []  # per body input: (state|batch|scalars|seed|shared|const, i)
        self._consts: list[torch.Tensor] = []

    def build(
        self,
        step: Callable,
        state: Sequence[torch.Tensor],
        batch: Sequence[torch.Tensor],
        scalars: torch.Tensor,
        shared: Sequence[torch.Tensor] = (),
    ) -> None:
        """Trace `step(state, batch, scalars) -> new state` once; the step may also read `shared`. Every input must
        be device data (not pending work) and stay unmodified: the step must return new tensors instead of
        updating its inputs."""
        import torch_xla.core.xla_builder as xb

        state, batch, shared = list(state), list(batch), list(shared)
        inputs = [*state, *batch, scalars, *shared]
        if compat.xla_pending(inputs):
            raise RuntimeError("steps_per_execution: the step's inputs must be materialised before tracing")
        new_state = list(step(state, batch, scalars))
        if len(new_state) != len(state):
            raise RuntimeError(f"the step returned {len(new_state)} state tensors for {len(state)}")
        if compat.xla_pending(inputs):
            raise RuntimeError("steps_per_execution: the traced step modified one of its inputs in place")
        ids, values = compat.xla_graph_inputs(new_state, inputs)
        body = xb.computation_from_module_proto("xla_train_step", compat.xla_hlo_module(new_state))
        where = {compat.xla_tensor_id(t): i for i, t in enumerate(inputs)}
        seed_id = compat.xla_seed_input_id()
        sources, consts = [], []
        for tid, value in zip(ids, values):
            i = where.get(tid)
            if tid == seed_id:
                sources.append(("seed", 0))
            elif i is None:  # a constant the trace made (a scalar uploaded as data): the same in every step
                sources.append(("const", len(consts)))
                consts.append(value)
            elif i < len(state):
                sources.append(("state", i))
            elif i < len(state) + len(batch):
                sources.append(("batch", i - len(state)))
            elif i == len(state) + len(batch):
                sources.append(("scalars", 0))
            else:
                sources.append(("shared", i - len(state) - len(batch) - 1))
        self._sources, self._consts = sources, consts
        self._n_state, self._n_batch, self._n_shared = len(state), len(batch), len(shared)
        build = self._while if self.loop == "while" else self._unrolled
        self.computation = build(body, self._params(state, batch, scalars, shared))

    def _params(self, state, batch, scalars, shared):
        """The program's parameters: (real steps, *state, *K stacked batch tensors, K scalar rows, K seeds,
        *shared, *constants), the order `run` passes them in."""
        import torch_xla.core.xla_builder as xb

        k = self.k
        builder = xb.create_builder("xla_train_steps")
        shapes = [
            torch.zeros((), dtype=torch.int32),
            *state,
            *(torch.empty((k, *t.shape), dtype=t.dtype) for t in batch),
            torch.empty((k, *scalars.shape), dtype=scalars.dtype),
            torch.empty((k,), dtype=torch.int64),
            *shared,
            *self._consts,
        ]
        return builder, [xb.mkparam(builder, i, xb.tensor_shape(t)) for i, t in enumerate(shapes)]

    def _unpack(self, ops):
        """(real steps, state, stacked batch tensors, scalar rows, seeds, shared + constants) from the
        parameters."""
        s, b = self._n_state, self._n_batch
        rest = ops[1 + s :]
        return ops[0], list(ops[1 : 1 + s]), rest[:b], rest[b], rest[b + 1], rest[b + 2 :]

    def _call(self, body, i, carry, stacked, per_step, seeds, fixed, at):
        """One step's outputs: the body called on step i's slice of every per-step input (`fixed`: the shared
        inputs, then the constants, the same for every step)."""
        import torch_xla.core.xla_builder as xb

        def arg(kind: str, j: int):
            if kind == "state":
                return carry[j]
            if kind == "batch":
                return at(stacked[j], i)
            if kind == "scalars":
                return at(per_step, i)
            if kind == "seed":
                return at(seeds, i)
            return fixed[j] if kind == "shared" else fixed[self._n_shared + j]

        result = xb.Op.call(body, [arg(kind, j) for kind, j in self._sources])
        return [result.get_tuple_element(j) for j in range(len(carry))]

    def _unrolled(self, body, params):
        import torch_xla.core.xla_builder as xb

        builder, ops = params
        n, carry, stacked, per_step, seeds, fixed = self._unpack(ops)

        def at(op, i: int):
            return op.slice_in_dim(i, i + 1, 0).reshape(list(op.shape().sizes)[1:])

        for i in range(self.k):
            new = self._call(body, i, carry, stacked, per_step, seeds, fixed, at)
            if i == 0:  # the first step always runs: a group holds at least one
                carry = new
            else:
                real = xb.Op.scalar(builder, i, dtype=xb.Type.S32) < n
                carry = [real.broadcast(list(c.shape().sizes)).select(a, c) for a, c in zip(new, carry)]
        return xb.Op.tuple(carry, builder=builder).build("xla_train_steps")

    def _while(self, body, params):
        """An XLA While loop whose carry is (step, real steps, every parameter): it runs the body n times, and
        the per-step inputs ride along unchanged, sliced at the step (gradient_accumulation's _body_fn_wrapper)."""
        import torch_xla.core.xla_builder as xb

        builder, ops = params
        zero = xb.Op.scalar(builder, 0, dtype=xb.Type.S32)

        def at(op, i):
            sizes = list(op.shape().sizes)
            start = [i] + [i.zeros_like() for _ in sizes[1:]]
            return op.dynamic_slice(start, [1, *sizes[1:]]).reshape(sizes[1:])

        def cond(i, *params):
            return i < params[0]

        def step(i, *params):
            n, carry, stacked, per_step, seeds, fixed = self._unpack(list(params))
            new = self._call(body, i, carry, stacked, per_step, seeds, fixed, at)
            one = xb.Op.scalar(i.builder(), 1, dtype=xb.Type.S32)
            return (i + one, n, *new, *params[1 + len(carry) :])

        loop = xb.Op.mkwhile([zero, *ops], cond, step)
        out = [loop.get_tuple_element(2 + j) for j in range(self._n_state)]
        return xb.Op.tuple(out, builder=builder).build("xla_train_steps")

    def run(
        self,
        state: Sequence[torch.Tensor],
        batches: Sequence[Sequence[torch.Tensor]],
        n: int,
        scalars: Sequence[Sequence[float]],
        seeds: Sequence[int],
        shard: Callable = lambda t: t,
        shared: Sequence[torch.Tensor] = (),
    ) -> list:
        """The state after the first n of len(batches) == k steps (the rest are padding); pending, not run.
        `scalars` and `seeds` hold one row per step; `shard` places each stacked batch tensor (SPMD); `shared`
        are this execution's values of the shared inputs the step was built with."""
        if len(shared) != self._n_shared:
            raise RuntimeError(f"the step was built with {self._n_shared} shared inputs, not {len(shared)}")
        device = state[0].device
        stacked = [shard(torch.stack([b[j] for b in batches])) for j in range(len(batches[0]))]
        per_step = torch.tensor(scalars, dtype=torch.float32).to(device)
        seed_t = torch.tensor([signed64(s) for s in seeds], dtype=torch.int64).to(device)
        count = device_data(torch.tensor(n, dtype=torch.int32), device)  # data: 1 would be a constant
        return compat.xla_user_computation(
            "xla::xla_train_steps",
            [count, *state, *stacked, per_step, seed_t, *shared, *self._consts],
            self.computation,
        )
