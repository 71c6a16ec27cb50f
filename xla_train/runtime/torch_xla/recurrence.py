"""torch_xla's scan of one RNN layer and direction, which runtime/layers/scan_rnn.py's ScanRNN calls: XLA While loops
(scan_loop.py) over the cell's step (runtime/layers/rnn_cells.py), with a backward written out as a second loop.

The backward is not torch_xla scan's own autograd, which caches graphs whatever requires_grad and needs torchax
under SPMD; both loops are batch-parallel, and the weight gradients are one matmul over all steps after them, so no
collective runs inside a loop.
"""

from __future__ import annotations

import torch

from xla_train.runtime.layers.rnn_cells import backward_body, forward_body
from xla_train.runtime.layers.scan_rnn import device_ones, pad_front, sum_steps
from xla_train.runtime.torch_xla.scan_loop import scan_loop


class _Recurrence(torch.autograd.Function):
    """One layer, one direction: (cell, chunk, gx (T, N, G*H), keep (T, N, 1), *state0, *weights) -> (out (T, N, H),
    *final state), weights being (W_hh,) or, for GRU with bias, (W_hh, b_hh).

    Each While iteration runs `chunk` steps. A T the chunk does not divide gets masked steps in front: there the
    state passes through exactly unchanged (the mask's where(), not arithmetic) and the gradients are zero, so
    outputs, final states and gradients are those of the T steps. In front, because that is where the data's own
    padding is; the final state and the last outputs, which a classifier reads, come after the real steps either
    way.
    """

    @staticmethod
    def forward(ctx, cell, chunk, gx, keep, *tensors):
        t = gx.shape[0]
        k = min(chunk, t)
        pad = -t % k
        gx, keep = pad_front(gx, pad), pad_front(keep, pad)
        weights = tensors[cell.states :]
        carry, saved = scan_loop(forward_body(cell, k), k, (*tensors, device_ones(gx)), (gx, keep))
        ctx.cell, ctx.n_weights, ctx.k, ctx.pad, ctx.state_shape = cell, len(weights), k, pad, carry[0].shape
        ctx.set_materialize_grads(False)  # outputs nothing reads get None, not a tensor of zeros to scan
        ctx.save_for_backward(keep, *weights, *saved, gx)
        return (cell.outputs(saved, keep, carry)[pad:], *carry[: cell.states])

    @staticmethod
    def backward(ctx, d_out, *d_state):
        cell, k, pad = ctx.cell, ctx.k, ctx.pad
        keep, *rest, gx = ctx.saved_tensors
        weights, saved = rest[: ctx.n_weights], rest[ctx.n_weights :]
        d_state = [weights[0].new_zeros(ctx.state_shape) if d is None else d for d in d_state]
        xs = (
            (keep, *cell.back_inputs(saved))
            if d_out is None
            else (pad_front(d_out, pad), keep, *cell.back_inputs(saved))
        )
        with torch.no_grad():
            body = backward_body(cell, k, d_out is not None)
            # d_gx is written over gx, which nothing reads after the forward loop: no zeros made for it, and one
            # (T, N, G) buffer fewer at the peak
            carry, (d_gx,) = scan_loop(
                body, k, (*d_state, weights[0], device_ones(weights[0])), xs, reverse=True, into=(gx,)
            )
        d_gh = cell.hidden_grads(d_gx, saved)  # the padding's gradients are zero
        # One matmul over all steps. This operand order makes XLA:CPU transpose h_prev (T, N, H) for it, where
        # "tng,tnh->gh" transposed d_gh (T, N, 4H), four times the data, and took about three times as long.
        d_weights = [torch.einsum("tnh,tng->hg", cell.h_prev(saved), d_gh).t()]
        if ctx.n_weights == 2:
            d_weights.append(sum_steps(d_gh[pad:]))  # the steps' own length: b_ih's sum takes the same ones
        return (None, None, d_gx[pad:], None, *carry[: cell.states], *d_weights)


torch_xla_recurrence = _Recurrence.apply
