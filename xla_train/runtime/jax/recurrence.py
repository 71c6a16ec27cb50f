"""The scan's recurrence on JAX: runtime/layers/scan_rnn.py's ScanRNN with each layer and direction as a jax.lax.scan.

torchax would trace nn.LSTM step by step, so its program, compile time and memory grew with the sequence length
(docs/hardware.md, "The LSTM on XLA"). Here ScanRNN runs as on torch_xla (the input projected in one matmul, the
table projected where an embedding feeds it, masks, layers, directions), and only its recurrence changes: a lax.scan
of the cell's own torch step (runtime/layers/rnn_cells.py) on torchax views, with a jax.custom_vjp whose backward is a second
scan of the cell's hand-written step_back, over the factors the forward saved, and the weight gradients one product
over all steps after it: JAX's own derivative of the forward scan would save and recompute more.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from torchax.interop import jax_view, torch_view

from xla_train.runtime.jax.compat import environment


def _in_torch(fn):
    """fn of torch tensors as a function of JAX arrays (tuples and None pass through)."""

    def run(*args):
        with environment():
            return jax_view(fn(*torch_view(args)))

    return run


def _rows_product(a, b, merge: bool):
    """The sum over steps and batch of a[t, n]^T b[t, n]: (A, B) from a (T, N, A) and b (T, N, B).

    merge (one device): the steps and the batch as one contraction of two matrices, which XLA:CPU (jax 0.10.2)
    multiplies as they lie, where einsum's two contracting dims made it transpose the gates' gradients (T, N, 4H)
    first, which took longer than the product (docs/results.md, "Runtimes side by side"). Over several devices the
    two dims stay apart, so that a split batch stays split: merged, the dim would be gathered onto every device."""
    if merge:
        rows = (((0,), (0,)), ((), ()))
        return jax.lax.dot_general(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), rows)
    return jnp.einsum("tnb,tna->ab", b, a)


@functools.cache
def _recurrence(cell, chunk: int, merge: bool):
    """(gx (T, N, G), keep (T, N, 1), *state0, *weights) -> (outputs (T, N, H), *final state), differentiable."""
    states = cell.states
    step = _in_torch(lambda carry, xs: (lambda c, s: (c, s[0]))(*cell.step(tuple(carry), tuple(xs))))
    back = _in_torch(lambda carry, xs: cell.step_back(tuple(carry), tuple(xs)))
    outputs = _in_torch(lambda saved, keep, carry: cell.outputs((saved,), keep, tuple(carry)))
    hidden_grads = _in_torch(lambda d_gx, saved: cell.hidden_grads(d_gx, (saved,)))
    h_prev = _in_torch(lambda saved: cell.h_prev((saved,)))

    def forward(gx, keep, tensors):
        carry, saved = jax.lax.scan(step, tuple(tensors), (gx, keep), unroll=chunk)
        return outputs(saved, keep, carry), tuple(carry[:states]), saved

    @jax.custom_vjp
    def recurrence(gx, keep, *tensors):
        out, finals, _ = forward(gx, keep, tensors)
        return (out, *finals)

    def fwd(gx, keep, *tensors):
        out, finals, saved = forward(gx, keep, tensors)
        return (out, *finals), (keep, tensors[states:], saved)

    def bwd(residuals, cotangents):
        keep, weights, saved = residuals
        d_out, *d_state = cotangents
        carry, d_gx = jax.lax.scan(back, (*d_state, weights[0]), (d_out, keep, saved), reverse=True, unroll=chunk)
        d_gh = hidden_grads(d_gx, saved)
        d_weights = [_rows_product(d_gh, h_prev(saved), merge)]
        if len(weights) == 2:  # GRU's b_hh, which r multiplies inside the loop
            d_weights.append(d_gh.sum((0, 1)))
        return (d_gx, None, *carry[:states], *d_weights)

    recurrence.defvjp(fwd, bwd)
    return recurrence


def jax_recurrence(devices: int):
    """ScanRNN's recurrence (runtime/layers/scan_rnn.py, _Recurrence's contract) on torchax tensors, for a program
    whose batch is split over `devices`."""

    def recurrence(cell, chunk, gx, keep, *tensors):
        out = _recurrence(cell, chunk, devices == 1)(*jax_view((gx, keep, *tensors)))
        return torch_view(tuple(out))

    recurrence.devices = devices
    return recurrence
