"""One time step of each recurrent cell, forward and backward, and the loop bodies that run K of them.

runtime/layers/scan_rnn.py runs these bodies in XLA While loops (runtime/torch_xla/scan_loop.py). A body runs a chunk of K steps,
unrolled, so that a device whose While iterations have a fixed cost pays it once per K steps; the compiled graph
grows with K, never with the sequence length.
"""

from __future__ import annotations

import functools

import torch

# Each cell is a namespace of functions of ONE time step; they slice gates on the last dimension only.
#   step(carry=(*state, *weights), xs=(gx_t, keep_t)) -> (carry, (saved_t,))
#   step_back(carry=(*d_state, w_hh), xs=(d_out_t or None, keep_t, saved_t)) -> (carry, d_gx_t); None: nothing
#   read the outputs, so they add no gradient
# keep_t (N, 1) is False where a mask skips the step: the state passes through unchanged and the output is zero.
# Each step saves ONE tensor (N, width * H) for the backward, so that the loop writes one buffer per step; the LSTM
# and the GRU save the factors their backward multiplies by (see _LSTM), the RNN its states.


def _plus(dh: torch.Tensor, dy: torch.Tensor | None) -> torch.Tensor:
    """The state's gradient plus the output's, which is None when nothing read the outputs."""
    return dh if dy is None else dh + dy


def _split(t: torch.Tensor, parts: int):
    size = t.shape[-1] // parts
    return [t[..., k * size : (k + 1) * size] for k in range(parts)]


class _LSTM:
    """Gate order i, f, g, o; both biases are folded into gx before the loop. Each step saves what the backward
    multiplies by, not what the forward computed: [g i(1-i) | c_prev f(1-f) | i(1-g^2) | tanh(c) o(1-o) |
    o(1-tanh(c)^2) | f | h_prev] (7H). The backward step is then a few products of its carry with one row of it;
    recomputing tanh(c) and the gates' derivatives there made XLA:CPU's backward iteration take four times the
    forward's, and saving them shortened the backward loop by far more than it lengthened the forward
    (docs/hardware.md). The outputs are the next step's h_prev, and the last one the
    final h."""

    states, bias_in_loop = 2, False

    @staticmethod
    def step(carry, xs):
        h, c, w_hh = carry
        gx, keep = xs
        a = gx + h @ w_hh.t()
        i, f, _, o = _split(torch.sigmoid(a), 4)
        g = torch.tanh(_split(a, 4)[2])
        c_new = f * c + i * g
        tc = torch.tanh(c_new)
        h_new = o * tc
        saved = torch.cat(
            [g * i * (1 - i), c * f * (1 - f), i * (1 - g * g), tc * o * (1 - o), o * (1 - tc * tc), f, h], -1
        )
        return (torch.where(keep, h_new, h), torch.where(keep, c_new, c), w_hh), (saved,)

    @staticmethod
    def outputs(saved, keep, carry):
        h_next = torch.cat([_split(saved[0], 7)[6][1:], carry[0][None]])  # the state after each step
        return torch.where(keep, h_next, torch.zeros_like(h_next))

    @staticmethod
    def back_inputs(saved):
        return saved

    @staticmethod
    def h_prev(saved):
        return _split(saved[0], 7)[6]

    @staticmethod
    def step_back(carry, xs):
        dh, dc, w_hh = carry  # w.r.t. the state after this step
        dy, keep, saved = xs
        size = dh.shape[-1]
        zero = torch.zeros_like(dh)
        dh_new = torch.where(keep, _plus(dh, dy), zero)  # a skipped step passed the state through untouched
        dc_new = torch.where(keep, dc, zero) + dh_new * saved[..., 4 * size : 5 * size]
        d_gates = torch.cat([dc_new, dc_new, dc_new, dh_new], -1) * saved[..., : 4 * size]
        dh_prev = d_gates @ w_hh + torch.where(keep, zero, dh)
        dc_prev = dc_new * saved[..., 5 * size : 6 * size] + torch.where(keep, zero, dc)
        return (dh_prev, dc_prev, w_hh), d_gates

    @staticmethod
    def hidden_grads(d_gx, saved):
        return d_gx  # the gradient of h @ W_hh^T (+ b_hh) is the gates' own


class _GRU:
    """Gate order r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), so b_hh rides in the carry with W_hh.
    Saves the factors of the backward, as _LSTM does: [(1-z)(1-n^2) (W_hn h + b_hn) r(1-r) | (h_prev-n) z(1-z) |
    (1-z)(1-n^2) | r | z | h_prev] (6H), so that the backward step recomputes nothing. The outputs are the next
    step's h_prev, and the last one the final h."""

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
        d_n = (1 - z) * (1 - n * n)
        saved = torch.cat([d_n * gh_n * r * (1 - r), (h - n) * z * (1 - z), d_n, rz, h], -1)
        return (torch.where(keep, h_new, h), w_hh, *b_hh), (saved,)

    @staticmethod
    def outputs(saved, keep, carry):
        h_next = torch.cat([_split(saved[0], 6)[5][1:], carry[0][None]])  # the state after each step
        return torch.where(keep, h_next, torch.zeros_like(h_next))

    @staticmethod
    def back_inputs(saved):
        return saved

    @staticmethod
    def h_prev(saved):
        return _split(saved[0], 6)[5]

    @staticmethod
    def step_back(carry, xs):
        dh, w_hh = carry
        dy, keep, saved = xs
        size = dh.shape[-1]
        zero = torch.zeros_like(dh)
        dh_new = torch.where(keep, _plus(dh, dy), zero)
        d_gx = torch.cat([dh_new, dh_new, dh_new], -1) * saved[..., : 3 * size]  # [d_r, d_z, d_n]
        r, z = saved[..., 3 * size : 4 * size], saved[..., 4 * size : 5 * size]
        d_gh = torch.cat([d_gx[..., : 2 * size], d_gx[..., 2 * size :] * r], -1)
        dh_prev = d_gh @ w_hh + dh_new * z + torch.where(keep, zero, dh)
        return (dh_prev, w_hh), d_gx

    @staticmethod
    def hidden_grads(d_gx, saved):
        r = _split(saved[0], 6)[3]
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
    da = torch.where(keep, _plus(dh, dy), zero) * d_act(_split(saved, 2)[1])
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
    def outputs(saved, keep, carry):
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
    first step (K^2 / 2 step updates per chunk: K=8 took 1.3 times the CPU time); a division is an expensive op,
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
def backward_body(cell, k: int, outputs_read: bool = True):
    """scan_loop's body for the backward scan: the cell's step_back over K steps, the last first. Without
    outputs_read, the steps hold no output gradient (a model that reads only the final state): no (T, N, H) of
    zeros is made, read or added."""

    def body(carry, steps):
        *carry, one = carry
        carry, outputs = tuple(carry), [None] * k
        for j in reversed(range(k)):
            carry, d_gx = cell.step_back(carry, steps[j] if outputs_read else (None, *steps[j]))
            carry = _once(carry, cell.states, one, k)
            outputs[j] = (d_gx,)
        return (*carry, one), outputs

    return body
