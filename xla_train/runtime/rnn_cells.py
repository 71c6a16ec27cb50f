"""One time step of each recurrent cell, forward and backward, and the loop bodies that run K of them.

runtime/scan_rnn.py runs these bodies in XLA While loops (runtime/scan_loop.py). A body runs a chunk of K steps,
unrolled, so that a device whose While iterations have a fixed cost pays it once per K steps; the compiled graph
grows with K, never with the sequence length.
"""

from __future__ import annotations

import functools

import torch

# Each cell is a namespace of functions of ONE time step; they slice gates on the last dimension only.
#   step(carry=(*state, *weights), xs=(gx_t, keep_t)) -> (carry, (saved_t,))
#   step_back(carry=(*d_state, w_hh), xs=(d_out_t, keep_t, saved_t)) -> (carry, d_gx_t)
# keep_t (N, 1) is False where a mask skips the step: the state passes through unchanged and the output is zero.
# Each step saves ONE tensor (N, width * H) for the backward, so that the loop writes one buffer per step; what is
# cheap to recompute (LSTM's tanh(c), the outputs) is recomputed rather than saved.


def _split(t: torch.Tensor, parts: int):
    size = t.shape[-1] // parts
    return [t[..., k * size : (k + 1) * size] for k in range(parts)]


def _g_columns(a: torch.Tensor) -> torch.Tensor:
    """(4H,) ones on the LSTM's g gate columns, zeros elsewhere. Built from 0 and 1 alone, which torch_xla keeps as
    constants (another Python scalar would become a graph input), so XLA folds it into the kernels."""
    zeros = a.new_zeros(a.shape[-1] // 4)
    return torch.cat([zeros, zeros, zeros + 1, zeros])


class _LSTM:
    """Gate order i, f, g, o; both biases are folded into gx before the loop. Saves [i f g o | h_prev | c_prev].

    The four gates are one sigmoid over all 4H columns, with g = tanh(a) = 2 sigmoid(2a) - 1: one elementwise
    pass, where a sigmoid of i, f, o and a tanh of g took slices and a concatenation (more kernels per step)."""

    states, bias_in_loop = 2, False

    @staticmethod
    def step(carry, xs):
        h, c, w_hh = carry
        gx, keep = xs
        a = gx + h @ w_hh.t()
        is_g = _g_columns(a)
        acts = torch.sigmoid(a * (1 + is_g)) * (1 + is_g) - is_g
        i, f, g, o = _split(acts, 4)
        c_new = f * c + i * g
        h_new = o * torch.tanh(c_new)
        return (torch.where(keep, h_new, h), torch.where(keep, c_new, c), w_hh), (torch.cat([acts, h, c], -1),)

    @staticmethod
    def outputs(saved, keep):
        i, f, g, o, _, c_prev = _split(saved[0], 6)
        out = o * torch.tanh(f * c_prev + i * g)
        return torch.where(keep, out, torch.zeros_like(out))

    @staticmethod
    def back_inputs(saved):
        return saved

    @staticmethod
    def h_prev(saved):
        return _split(saved[0], 6)[4]

    @staticmethod
    def step_back(carry, xs):
        dh, dc, w_hh = carry  # w.r.t. the state after this step
        dy, keep, saved = xs
        acts, c_prev = saved[..., : saved.shape[-1] * 2 // 3], _split(saved, 6)[5]
        i, f, g, o = _split(acts, 4)
        tc = torch.tanh(f * c_prev + i * g)
        zero = torch.zeros_like(dh)
        dh_new = torch.where(keep, dh + dy, zero)  # a skipped step passed the state through untouched
        dc_new = torch.where(keep, dc, zero) + dh_new * o * (1 - tc * tc)
        # d(sigmoid) = s (1 - s) on i, f, o and d(tanh) = 1 - g^2 on g, in one pass over the 4H columns
        is_g = _g_columns(acts)
        slope = acts * (1 - acts) * (1 - is_g) + (1 - acts * acts) * is_g
        d_gates = torch.cat([dc_new * g, dc_new * c_prev, dc_new * i, dh_new * tc], -1) * slope
        dh_prev = d_gates @ w_hh + torch.where(keep, zero, dh)
        dc_prev = dc_new * f + torch.where(keep, zero, dc)
        return (dh_prev, dc_prev, w_hh), d_gates

    @staticmethod
    def hidden_grads(d_gx, saved):
        return d_gx  # the gradient of h @ W_hh^T (+ b_hh) is the gates' own


class _GRU:
    """Gate order r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), so b_hh rides in the carry with W_hh.
    Saves [r z n | W_hn h + b_hn | h_prev]."""

    states, bias_in_loop = 1, True

    @staticmethod
    def step(carry, xs):
        h, w_hh, *b_hh = carry
        gx, keep = xs
        gh = h @ w_hh.t()
        if b_hh:
            gh = gh + b_hh[0]
        h_size = h.shape[-1]
        rz = torch.sigmoid(gx[..., : 2 * h_size] + gh[..., : 2 * h_size])
        r, z = _split(rz, 2)
        gh_n = gh[..., 2 * h_size :]
        n = torch.tanh(gx[..., 2 * h_size :] + r * gh_n)
        h_new = n + z * (h - n)
        return (torch.where(keep, h_new, h), w_hh, *b_hh), (torch.cat([rz, n, gh_n, h], -1),)

    @staticmethod
    def outputs(saved, keep):
        _, z, n, _, h_prev = _split(saved[0], 5)
        return torch.where(keep, n + z * (h_prev - n), torch.zeros_like(n))

    @staticmethod
    def back_inputs(saved):
        return saved

    @staticmethod
    def h_prev(saved):
        return _split(saved[0], 5)[4]

    @staticmethod
    def step_back(carry, xs):
        dh, w_hh = carry
        dy, keep, saved = xs
        r, z, n, gh_n, h_prev = _split(saved, 5)
        zero = torch.zeros_like(dh)
        dh_new = torch.where(keep, dh + dy, zero)
        da_n = dh_new * (1 - z) * (1 - n * n)
        da_z = dh_new * (h_prev - n) * z * (1 - z)
        da_r = da_n * gh_n * r * (1 - r)
        dh_prev = torch.cat([da_r, da_z, da_n * r], dim=-1) @ w_hh + dh_new * z + torch.where(keep, zero, dh)
        return (dh_prev, w_hh), torch.cat([da_r, da_z, da_n], dim=-1)

    @staticmethod
    def hidden_grads(d_gx, saved):
        r = _split(saved[0], 5)[0]
        d_r, d_z, d_n = _split(d_gx, 3)
        return torch.cat([d_r, d_z, d_n * r], dim=-1)  # n's pre-activation sees W_hn h + b_hn through r


def _rnn_step(carry, xs, act):
    h, w_hh = carry
    gx, keep = xs
    h_new = act(gx + h @ w_hh.t())
    return (torch.where(keep, h_new, h), w_hh), (torch.cat([h, h_new], -1),)


def _rnn_step_back(carry, xs, d_act):
    dh, w_hh = carry
    dy, keep, saved = xs
    zero = torch.zeros_like(dh)
    da = torch.where(keep, dh + dy, zero) * d_act(_split(saved, 2)[1])
    return (da @ w_hh + torch.where(keep, zero, dh), w_hh), da


class _TanhRNN:
    """Saves [h_prev | h_new]."""

    states, bias_in_loop = 1, False

    @staticmethod
    def step(carry, xs):
        return _rnn_step(carry, xs, torch.tanh)

    @staticmethod
    def step_back(carry, xs):
        return _rnn_step_back(carry, xs, lambda h: 1 - h * h)

    @staticmethod
    def outputs(saved, keep):
        h_new = _split(saved[0], 2)[1]
        return torch.where(keep, h_new, torch.zeros_like(h_new))

    @staticmethod
    def back_inputs(saved):
        return saved

    @staticmethod
    def h_prev(saved):
        return _split(saved[0], 2)[0]

    @staticmethod
    def hidden_grads(d_gx, saved):
        return d_gx


class _ReluRNN(_TanhRNN):
    @staticmethod
    def step(carry, xs):
        return _rnn_step(carry, xs, torch.relu)

    @staticmethod
    def step_back(carry, xs):
        return _rnn_step_back(carry, xs, lambda h: (h > 0).to(h.dtype))


CELLS = {"LSTM": _LSTM, "GRU": _GRU, "RNN_TANH": _TanhRNN, "RNN_RELU": _ReluRNN}


def _once(carry, states: int, one: torch.Tensor, k: int):
    """The state divided by a runtime 1, which is exact, when a chunk runs several steps. XLA:CPU otherwise fuses
    each step's cheap state update into every later kernel that reads it, recomputing the chain from the chunk's
    first step (K^2 / 2 step updates per chunk: K=8 took 1.4 times the CPU time); a division is an expensive op,
    which XLA computes once. XLA cannot drop it: `one` is a graph input, not a constant."""
    return carry if k == 1 else (*(t / one for t in carry[:states]), *carry[states:])


@functools.cache
def forward_body(cell, k: int):
    """scan_loop's body for the forward scan: the cell's step over K steps, in time order. Carry (*carry, one)."""

    def body(carry, steps):
        *carry, one = carry
        carry, outputs = tuple(carry), []
        for xs in steps:
            carry, saved = cell.step(carry, xs)
            carry = _once(carry, cell.states, one, k)
            outputs.append(saved)
        return (*carry, one), outputs

    return body


@functools.cache
def backward_body(cell, k: int):
    """scan_loop's body for the backward scan: the cell's step_back over K steps, the last first."""

    def body(carry, steps):
        *carry, one = carry
        carry, outputs = tuple(carry), [None] * k
        for j in reversed(range(k)):
            carry, d_gx = cell.step_back(carry, steps[j])
            carry = _once(carry, cell.states, one, k)
            outputs[j] = (d_gx,)
        return (*carry, one), outputs

    return body
