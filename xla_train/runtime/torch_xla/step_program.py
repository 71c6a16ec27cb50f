"""K training steps as one XLA program, traced once: what `steps_per_execution=K` runs.

Tracing a step in Python can cost the host more than the step costs a TPU, so one step is traced once, as a pure
function of (state, batch, per-step scalars, seed) to the new state, and its HLO is called K times in one graph,
as an XLA While loop or unrolled (docs/feeding.md, "Keep a TPU fed"). The number of real steps is an input, so a
remainder compiles nothing new; each step's seed input is the device seed it would have had alone. Shared inputs
(the epoch's order of resident data) are parameters passed once, not stacked. A tensor the step reads that is none
of its inputs becomes a constant of the program, the value it had when traced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.runtime.torch_xla.backend import XLA

MASK64 = (1 << 64) - 1
LOOPS = ("unroll", "while")


def signed64(seed: int) -> int:
    """A uint64 seed as the int64 an XLA seed tensor holds."""
    seed &= MASK64
    return seed - (1 << 64) if seed >= 1 << 63 else seed


class Layout:
    """Named groups of tensors laid end to end in one flat list, in the order the sizes are given: the one place
    that says where each group starts, for a program's parameters and for the state a step carries."""

    def __init__(self, **sizes: int) -> None:
        self.sizes = sizes

    def split(self, flat) -> dict[str, list]:
        flat = list(flat)
        if len(flat) != sum(self.sizes.values()):
            raise RuntimeError(f"{len(flat)} tensors for a layout of {sum(self.sizes.values())} ({self.sizes})")
        out, start = {}, 0
        for name, n in self.sizes.items():
            out[name], start = flat[start : start + n], start + n
        return out

    def join(self, **groups) -> list:
        if groups.keys() != self.sizes.keys() or any(len(groups[k]) != n for k, n in self.sizes.items()):
            got = {k: len(v) for k, v in groups.items()}
            raise RuntimeError(f"groups {got} do not fit the layout {self.sizes}")
        return [t for name in self.sizes for t in groups[name]]

    def locate(self, i: int) -> tuple[str, int]:
        """(group, index in it) of flat position i."""
        for name, n in self.sizes.items():
            if i < n:
                return name, i
            i -= n
        raise IndexError(i)


class StepProgram:
    """`build` traces one step; `run` executes up to k of them as one graph and returns the new state.

    Its parameters are `self.layout`'s groups: count (the real steps), state, batch (each tensor K stacked),
    scalars (K rows), seeds (K), shared, consts.
    """

    def __init__(self, k: int, loop: str = "unroll") -> None:
        if loop not in LOOPS:
            raise ValueError(f"execution_loop={loop!r}; use one of {', '.join(LOOPS)}")
        self.k, self.loop = k, loop
        self.computation = None
        self._sources: list[tuple[str, int]] = []  # per body input: (a parameter group, index in it)
        self._consts: list[torch.Tensor] = []
        self.layout: Layout | None = None

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
        traced = Layout(state=len(state), batch=len(batch), scalars=1, shared=len(shared))
        inputs = traced.join(state=state, batch=batch, scalars=[scalars], shared=shared)
        if xla_compat.xla_pending(inputs):
            raise RuntimeError("steps_per_execution: the step's inputs must be materialised before tracing")
        new_state = list(step(state, batch, scalars))
        if len(new_state) != len(state):
            raise RuntimeError(f"the step returned {len(new_state)} state tensors for {len(state)}")
        if xla_compat.xla_pending(inputs):
            raise RuntimeError("steps_per_execution: the traced step modified one of its inputs in place")
        ids, values = xla_compat.xla_graph_inputs(new_state, inputs)
        body = xb.computation_from_module_proto("xla_train_step", xla_compat.xla_hlo_module(new_state))
        where = {xla_compat.xla_tensor_id(t): i for i, t in enumerate(inputs)}
        seed_id = xla_compat.xla_seed_input_id()
        sources, consts = [], []
        for tid, value in zip(ids, values):
            if tid == seed_id:
                sources.append(("seeds", 0))
            elif tid not in where:  # a constant the trace made (a scalar uploaded as data): the same in every step
                sources.append(("consts", len(consts)))
                consts.append(value)
            else:
                sources.append(traced.locate(where[tid]))
        self._sources, self._consts = sources, consts
        self.layout = Layout(
            count=1, state=len(state), batch=len(batch), scalars=1, seeds=1, shared=len(shared), consts=len(consts)
        )
        build = self._while if self.loop == "while" else self._unrolled
        self.computation = build(body, self._params(state, batch, scalars, shared))

    def _params(self, state, batch, scalars, shared):
        """The program's parameters, in `self.layout`'s order (the order `run` passes them in)."""
        import torch_xla.core.xla_builder as xb

        k = self.k
        builder = xb.create_builder("xla_train_steps")
        shapes = self.layout.join(
            count=[torch.zeros((), dtype=torch.int32)],
            state=state,
            batch=[torch.empty((k, *t.shape), dtype=t.dtype) for t in batch],
            scalars=[torch.empty((k, *scalars.shape), dtype=scalars.dtype)],
            seeds=[torch.empty((k,), dtype=torch.int64)],
            shared=shared,
            consts=self._consts,
        )
        return builder, [xb.mkparam(builder, i, xb.tensor_shape(t)) for i, t in enumerate(shapes)]

    def _call(self, body, i, p: dict, carry, at):
        """One step's outputs: the body called on step i's slice of every per-step parameter group in `p` (the
        parameters split by the layout), with `carry` as its state."""
        import torch_xla.core.xla_builder as xb

        def arg(group: str, j: int):
            if group == "state":
                return carry[j]
            if group in ("shared", "consts"):  # the same for every step
                return p[group][j]
            return at(p[group][j], i)  # batch, scalars, seeds: step i's row

        result = xb.Op.call(body, [arg(group, j) for group, j in self._sources])
        return [result.get_tuple_element(j) for j in range(len(carry))]

    def _unrolled(self, body, params):
        import torch_xla.core.xla_builder as xb

        builder, ops = params
        p = self.layout.split(ops)
        (n,), carry = p["count"], p["state"]

        def at(op, i: int):
            return op.slice_in_dim(i, i + 1, 0).reshape(list(op.shape().sizes)[1:])

        for i in range(self.k):
            new = self._call(body, i, p, carry, at)
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
            p = self.layout.split(params)
            new = self._call(body, i, p, p["state"], at)
            one = xb.Op.scalar(i.builder(), 1, dtype=xb.Type.S32)
            return (i + one, *self.layout.join(**{**p, "state": new}))

        loop = xb.Op.mkwhile([zero, *ops], cond, step)
        out = [loop.get_tuple_element(2 + j) for j in range(self.layout.sizes["state"])]
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
        device = state[0].device
        stacked = [shard(torch.stack([b[j] for b in batches])) for j in range(len(batches[0]))]
        per_step = torch.tensor(scalars, dtype=torch.float32).to(device)
        seed_t = torch.tensor([signed64(s) for s in seeds], dtype=torch.int64).to(device)
        count = XLA.to_device(torch.tensor(n, dtype=torch.int32), device)  # data: 1 would be a constant
        params = self.layout.join(
            count=[count],
            state=state,
            batch=stacked,
            scalars=[per_step],
            seeds=[seed_t],
            shared=list(shared),
            consts=self._consts,
        )
        return xla_compat.xla_user_computation("xla::xla_train_steps", params, self.computation)
