"""An XLA While loop that runs K time steps per iteration, built once per body and shapes.

torch_xla's scan (torch_xla.experimental.scan) traces its function, lowers it and builds the While computation
again on every call, that is on every training step: host work that grew with K when a body ran K steps (four
times one step's at K=8, measured). This loop keeps the built computation, as torch_xla's own xla_op_registry
does, so a step after the first adds one node to the lazy graph. Each iteration slices its K steps straight out
of the (T, ...) inputs and writes its K outputs back in place: nothing is reshaped or copied around the loop.
"""

from __future__ import annotations

import itertools

import torch

from xla_train.runtime.torch_xla import compat as xla_compat

_BUILT: dict = {}  # (body, k, reverse, shapes and dtypes) -> (While computation, the ys' shapes and dtypes)


def scan_loop(body, k: int, init: tuple, xs: tuple, reverse: bool = False, into: tuple = ()) -> tuple[tuple, tuple]:
    """(final carry, ys): body over xs (T, ...) K steps at a time (T % K == 0); reverse visits the last chunk first.

    body(carry, steps) -> (carry, outputs): `steps` holds one tuple of slices (N, ...) per step of the chunk, in
    time order (a reversed scan's body takes them last first itself), and `outputs` one tuple of tensors per step,
    in the same order; each ys[m] is (T, *outputs[j][m].shape). body must be a function of its arguments alone.
    `into` names tensors to write ys over, where shape and dtype match (every step writes its own), in place of
    zeros: a buffer that nothing reads afterwards saves a (T, ...) of zeros and its memory.
    """
    t = xs[0].shape[0]
    if t % k or any(x.shape[0] != t for x in xs):
        raise ValueError(f"scan_loop needs xs of one length that {k} divides, got {[tuple(x.shape) for x in xs]}")
    key = (body, k, reverse, *((tuple(v.shape), v.dtype) for v in itertools.chain(init, xs)))
    if key not in _BUILT:
        _BUILT[key] = _build(body, k, init, xs, reverse)
    computation, y_specs = _BUILT[key]
    device = xs[0].device
    ys = [
        into[m]
        if m < len(into) and (tuple(into[m].shape), into[m].dtype) == ((t, *shape), dtype)
        else torch.zeros((t, *shape), dtype=dtype, device=device)
        for m, (shape, dtype) in enumerate(y_specs)
    ]
    counter = torch.tensor(0, dtype=torch.int64, device=device)
    out = xla_compat.xla_user_computation("xla::scan", [counter, *init, *xs, *ys], computation)
    return tuple(out[1 : 1 + len(init)]), tuple(out[1 + len(init) + len(xs) :])


def _build(body, k: int, init: tuple, xs: tuple, reverse: bool):
    """The While computation of scan_loop, as torch_xla's _scan_impl_flat builds its own, with K steps each."""
    import torch_xla.core.xla_builder as xb

    fake_carry = [xb.create_placeholder_tensor(v.shape, v.dtype) for v in init]
    fake_steps = [[xb.create_placeholder_tensor(v.shape[1:], v.dtype) for v in xs] for _ in range(k)]
    carry, outputs = body(tuple(fake_carry), [tuple(s) for s in fake_steps])
    outputs = [tuple(o) for o in outputs]
    fakes = [*fake_carry, *itertools.chain(*fake_steps)]
    hlo, ids, n_params = xla_compat.xla_lowered([*carry, *itertools.chain(*outputs)], fakes)
    if n_params != len({i for i in ids if i != -1}):
        raise ValueError(
            "the scan body uses a tensor other than its arguments (a captured tensor, or a Python scalar other "
            "than 0 and 1, which torch_xla makes a graph input); the cached loop would freeze its value"
        )
    fn = xb.computation_from_module_proto("fn_computation", hlo)
    carry_ids, step_ids = ids[: len(init)], [ids[len(init) + j * len(xs) :][: len(xs)] for j in range(k)]

    # The While carries (counter, *carry, *xs, *ys); iteration i runs steps i*K ... i*K + K - 1 (reversed: the
    # chunks from the last), slicing each step's inputs and writing its outputs at that step.
    device, n_iter, n_y = xs[0].device, xs[0].shape[0] // k, len(outputs[0])
    y_specs = [(tuple(o.shape), o.dtype) for o in outputs[0]]
    builder = xb.create_builder("scan")
    operands = [
        torch.tensor(0, dtype=torch.int64, device=device),
        *init,
        *xs,
        *(torch.zeros((xs[0].shape[0], *shape), dtype=dtype, device=device) for shape, dtype in y_specs),
    ]
    params = [xb.mkparam(builder, i, xb.tensor_shape(v)) for i, v in enumerate(operands)]
    first_x, first_y = 1 + len(init), 1 + len(init) + len(xs)

    def body_fn(*p):
        def s64(value):
            return xb.Op.scalar(p[0].builder(), value, dtype=xb.Type.S64)

        chunk = s64(n_iter - 1) - p[0] if reverse else p[0]
        steps = [chunk * s64(k) + s64(j) for j in range(k)]
        args = {pid: p[1 + i] for i, pid in enumerate(carry_ids)}  # by the body's parameter number
        for j, ids_j in enumerate(step_ids):
            args.update({pid: _slice(p[first_x + i], steps[j]) for i, pid in enumerate(ids_j)})
        args.pop(-1, None)  # inputs the body does not read
        result = xb.Op.call(fn, [args[i] for i in range(len(args))])
        new = [p[0] + s64(1), *(result.get_tuple_element(i) for i in range(len(init))), *p[1 + len(init) :]]
        for j in range(k):
            for m in range(n_y):
                y = result.get_tuple_element(len(init) + j * n_y + m)
                new[first_y + m] = _update(new[first_y + m], y, steps[j])
        return tuple(new)

    def cond_fn(counter, *rest):
        return counter < xb.Op.scalar(counter.builder(), n_iter, dtype=xb.Type.S64)

    return xb.Op.mkwhile(tuple(params), cond_fn, body_fn).build("scan"), y_specs


def _slice(xs, step):
    """xs[step] of an op (T, ...)."""
    sizes = list(xs.shape().sizes)
    return xs.dynamic_slice([step, *(step.zeros_like() for _ in sizes[1:])], [1, *sizes[1:]]).reshape(sizes[1:])


def _update(ys, y, step):
    """ys with ys[step] = y."""
    return ys.dynamic_update_slice(y.broadcast([1]), [step, *(step.zeros_like() for _ in ys.shape().sizes[1:])])
