"""nn.LSTM, nn.GRU and nn.RNN as XLA While loops, swapped in when a model runs on XLA.

XLA traces a recurrent layer step by step, so its compile time grows with the sequence length. Here each layer and
direction projects its whole input in one matmul, and one traced recurrent step is looped by torch_xla's `scan` (the
reverse direction scans the time-flipped sequence). The backward is a second scan written out per cell, not scan's
own autograd, which caches graphs whatever requires_grad and needs torchax under SPMD; both loops are batch-parallel,
and the weight gradients are one matmul over all steps after them, so no collective runs inside a loop. The
recurrent weight (and GRU's b_hh, which r multiplies) rides in each scan's carry: a closure over it fails to trace.
ScanRNN holds the module's own Parameters under their names, so checkpoints load into the nn module, and
restore_rnn puts it back. What the scan cannot run (cells, proj_size, a subclass's own forward) stays as it is,
with one warning naming it (docs/hardware.md, "The LSTM on XLA").
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence

# Each cell is a namespace of functions of ONE time step, so that a later change can unroll a chunk of K steps
# inside one While iteration: scan over xs reshaped to (T/K, K, ...), with a body that calls the step K times.
# They slice gates on the last dimension only, and must stay module-level objects: scan caches its trace by function.
#   step(carry=(*state, *weights), xs=(gx_t, keep_t)) -> (carry, saved_t)
#   step_back(carry=(*d_state, w_hh), xs=(d_out_t, keep_t, *back_inputs(saved)_t)) -> (carry, d_gx_t)
# keep_t (N, 1) is False where a mask skips the step: the state passes through unchanged and the output is zero.


def _split(t: torch.Tensor, parts: int):
    size = t.shape[-1] // parts
    return [t[..., k * size : (k + 1) * size] for k in range(parts)]


class _LSTM:
    """Gate order i, f, g, o; both biases are folded into gx before the loop."""

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
        acts = torch.cat([i, f, g, o], dim=-1)
        return (torch.where(keep, o * tc, h), torch.where(keep, c_new, c), w_hh), (h, c, acts, tc)

    @staticmethod
    def outputs(saved, keep):
        _, _, acts, tc = saved
        return torch.where(keep, _split(acts, 4)[3] * tc, torch.zeros_like(tc))

    @staticmethod
    def back_inputs(saved):
        _, c_prev, acts, tc = saved
        return c_prev, acts, tc

    @staticmethod
    def step_back(carry, xs):
        dh, dc, w_hh = carry  # w.r.t. the state after this step
        dy, keep, c_prev, acts, tc = xs
        i, f, g, o = _split(acts, 4)
        zero = torch.zeros_like(dh)
        dh_new = torch.where(keep, dh + dy, zero)  # a skipped step passed the state through untouched
        dc_new = torch.where(keep, dc, zero) + dh_new * o * (1 - tc * tc)
        d_gates = torch.cat(
            [
                dc_new * g * i * (1 - i),
                dc_new * c_prev * f * (1 - f),
                dc_new * i * (1 - g * g),
                dh_new * tc * o * (1 - o),
            ],
            dim=-1,
        )
        dh_prev = d_gates @ w_hh + torch.where(keep, zero, dh)
        dc_prev = dc_new * f + torch.where(keep, zero, dc)
        return (dh_prev, dc_prev, w_hh), d_gates

    @staticmethod
    def hidden_grads(d_gx, saved):
        return d_gx  # the gradient of h @ W_hh^T (+ b_hh) is the gates' own


class _GRU:
    """Gate order r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), so b_hh rides in the carry with W_hh."""

    states, bias_in_loop = 1, True

    @staticmethod
    def step(carry, xs):
        h, w_hh, *b_hh = carry
        gx, keep = xs
        gh = h @ w_hh.t()
        if b_hh:
            gh = gh + b_hh[0]
        gx_r, gx_z, gx_n = _split(gx, 3)
        gh_r, gh_z, gh_n = _split(gh, 3)
        r, z = torch.sigmoid(gx_r + gh_r), torch.sigmoid(gx_z + gh_z)
        n = torch.tanh(gx_n + r * gh_n)
        h_new = n + z * (h - n)
        return (torch.where(keep, h_new, h), w_hh, *b_hh), (h, torch.cat([r, z, n], dim=-1), gh_n)

    @staticmethod
    def outputs(saved, keep):
        h_prev, acts, _ = saved
        _, z, n = _split(acts, 3)
        return torch.where(keep, n + z * (h_prev - n), torch.zeros_like(n))

    @staticmethod
    def back_inputs(saved):
        return saved  # h_prev, acts, gh_n

    @staticmethod
    def step_back(carry, xs):
        dh, w_hh = carry
        dy, keep, h_prev, acts, gh_n = xs
        r, z, n = _split(acts, 3)
        zero = torch.zeros_like(dh)
        dh_new = torch.where(keep, dh + dy, zero)
        da_n = dh_new * (1 - z) * (1 - n * n)
        da_z = dh_new * (h_prev - n) * z * (1 - z)
        da_r = da_n * gh_n * r * (1 - r)
        dh_prev = torch.cat([da_r, da_z, da_n * r], dim=-1) @ w_hh + dh_new * z + torch.where(keep, zero, dh)
        return (dh_prev, w_hh), torch.cat([da_r, da_z, da_n], dim=-1)

    @staticmethod
    def hidden_grads(d_gx, saved):
        r = _split(saved[1], 3)[0]
        d_r, d_z, d_n = _split(d_gx, 3)
        return torch.cat([d_r, d_z, d_n * r], dim=-1)  # n's pre-activation sees W_hn h + b_hn through r


def _rnn_step(carry, xs, act):
    h, w_hh = carry
    gx, keep = xs
    h_new = act(gx + h @ w_hh.t())
    return (torch.where(keep, h_new, h), w_hh), (h, h_new)


def _rnn_step_back(carry, xs, d_act):
    dh, w_hh = carry
    dy, keep, h_new = xs
    zero = torch.zeros_like(dh)
    da = torch.where(keep, dh + dy, zero) * d_act(h_new)
    return (da @ w_hh + torch.where(keep, zero, dh), w_hh), da


class _TanhRNN:
    states, bias_in_loop = 1, False

    @staticmethod
    def step(carry, xs):
        return _rnn_step(carry, xs, torch.tanh)

    @staticmethod
    def step_back(carry, xs):
        return _rnn_step_back(carry, xs, lambda h: 1 - h * h)

    @staticmethod
    def outputs(saved, keep):
        return torch.where(keep, saved[1], torch.zeros_like(saved[1]))

    @staticmethod
    def back_inputs(saved):
        return (saved[1],)

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


class _Recurrence(torch.autograd.Function):
    """One layer, one direction: (cell, gx (T, N, G*H), keep (T, N, 1), *state0, *weights) -> (out (T, N, H),
    *final state), weights being (W_hh,) or, for GRU with bias, (W_hh, b_hh)."""

    @staticmethod
    def forward(ctx, cell, gx, keep, *tensors):
        from torch_xla.experimental.scan import scan

        weights = tensors[cell.states :]
        carry, saved = scan(cell.step, tuple(tensors), (gx, keep), is_fn_pure=True)
        ctx.cell, ctx.n_weights = cell, len(weights)
        ctx.save_for_backward(keep, *weights, *saved)
        return (cell.outputs(saved, keep), *carry[: cell.states])

    @staticmethod
    def backward(ctx, d_out, *d_state):
        from torch_xla.experimental.scan import scan

        cell = ctx.cell
        keep, *rest = ctx.saved_tensors
        weights, saved = rest[: ctx.n_weights], rest[ctx.n_weights :]
        back = [torch.flip(t, [0]) for t in (d_out, keep, *cell.back_inputs(saved))]  # scan runs forwards only
        with torch.no_grad():
            carry, d_gx = scan(cell.step_back, (*d_state, weights[0]), tuple(back), is_fn_pure=True)
        d_gx = torch.flip(d_gx, [0])
        d_gh = cell.hidden_grads(d_gx, saved)
        d_weights = [torch.einsum("tng,tnh->gh", d_gh, saved[0])]  # one matmul over all steps, outside the loop
        if ctx.n_weights == 2:
            d_weights.append(d_gh.sum((0, 1)))
        return (None, d_gx, None, *carry[: cell.states], *d_weights)


class ScanRNN(nn.Module):
    """nn.LSTM's, nn.GRU's or nn.RNN's forward (any layers, directions, bias, dropout), run as scans.

    Also takes MaskedLSTM's `mask` (N, T) (T for unbatched input): where it is False, every layer and direction
    leaves its state unchanged and outputs zeros, as if the step were absent (the reverse direction starts at the
    last kept step). A PackedSequence input runs through the replaced module's own forward, unrolled.
    """

    def __init__(self, rnn: nn.RNNBase):
        super().__init__()
        why = unrolled(rnn) if isinstance(rnn, nn.RNNBase) else (type(rnn).__name__, "")
        if why:
            raise ValueError(f"ScanRNN cannot run {why[0]}")
        self.mode, self.cell = rnn.mode, CELLS[rnn.mode]
        self.input_size, self.hidden_size, self.num_layers = rnn.input_size, rnn.hidden_size, rnn.num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = (
            rnn.bias,
            rnn.batch_first,
            float(rnn.dropout),
            rnn.bidirectional,
        )
        self.training = rnn.training
        self.names = list(rnn._flat_weights_names)
        for name in self.names:
            setattr(self, name, getattr(rnn, name))  # the same Parameter, not a copy, in nn's order
        self.__dict__["replaced"] = rnn  # kept for restore_rnn, outside the module tree and the state dict

    def extra_repr(self) -> str:
        return (
            f"{self.mode}, {self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, bias={self.bias}, "
            f"batch_first={self.batch_first}, dropout={self.dropout}, bidirectional={self.bidirectional}"
        )

    def current(self) -> nn.RNNBase:
        """The replaced module, holding this one's Parameters and training mode."""
        rnn = self.replaced
        for name in self.names:
            setattr(rnn, name, getattr(self, name))  # nn.RNNBase keeps its flat weight list in step
        rnn.train(self.training)
        return rnn

    def forward(self, input, hx=None, mask=None):  # noqa: A002 (nn's argument name)
        if isinstance(input, PackedSequence):
            if not self.__dict__.setdefault("warned", False):
                self.__dict__["warned"] = True
                warnings.warn(
                    f"{type(self.replaced).__name__} got a PackedSequence, which XLA traces step by step, so its "
                    "compile time grows with the sequence length; a padded batch (and MaskedLSTM's mask) runs as "
                    "one loop",
                    stacklevel=2,
                )
            return self.current()(input, hx)
        lstm, batched = self.mode == "LSTM", input.dim() == 3
        if not batched:  # (T, E): a batch of one, time-major
            x = input.unsqueeze(1)
            hx = None if hx is None else tuple(h.unsqueeze(1) for h in hx) if lstm else hx.unsqueeze(1)
        else:
            x = input.transpose(0, 1) if self.batch_first else input  # (T, N, E)
        t, n = x.shape[:2]
        if mask is None:
            keep = torch.ones(t, n, 1, dtype=torch.bool, device=x.device)
        else:
            keep = (mask.to(torch.bool).transpose(0, 1) if batched else mask.to(torch.bool)[:, None])[..., None]
        directions = 2 if self.bidirectional else 1
        finals = []  # [layer 0 forward, layer 0 reverse, layer 1 forward, ...], as nn orders h_n
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:  # nn's dropout: on each layer's output but the last
                x = F.dropout(x, self.dropout, training=True)
            outs = []
            for d in range(directions):
                k = layer * directions + d
                state0 = None if hx is None else (hx[0][k], hx[1][k]) if lstm else (hx[k],)
                if d == 0:
                    out, final = self._direction(f"_l{layer}", x, keep, state0)
                else:  # the reverse direction scans the time-flipped sequence
                    out, final = self._direction(f"_l{layer}_reverse", x.flip(0), keep.flip(0), state0)
                    out = out.flip(0)
                outs.append(out)
                finals.append(final)
            x = outs[0] if directions == 1 else torch.cat(outs, dim=-1)
        states = [torch.stack([f[s] for f in finals]) for s in range(self.cell.states)]
        if not batched:
            x, states = x.squeeze(1), [s.squeeze(1) for s in states]
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (tuple(states) if lstm else states[0])

    def _direction(self, suffix: str, x: torch.Tensor, keep: torch.Tensor, state0):
        """One layer in one direction over x (T, N, E): its outputs (T, N, H) and final state."""
        w_ih, w_hh = getattr(self, f"weight_ih{suffix}"), getattr(self, f"weight_hh{suffix}")
        # Under autocast the projection runs in bf16; the recurrence keeps the weights' dtype throughout.
        gx, weights = F.linear(x, w_ih).to(w_hh.dtype), (w_hh,)
        if self.bias:
            b_ih, b_hh = getattr(self, f"bias_ih{suffix}"), getattr(self, f"bias_hh{suffix}")
            if self.cell.bias_in_loop:
                gx, weights = gx + b_ih, (w_hh, b_hh)
            else:
                gx = gx + (b_ih + b_hh)
        if state0 is None:
            state0 = [gx.new_zeros(x.shape[1], self.hidden_size) for _ in range(self.cell.states)]
        out, *final = _Recurrence.apply(self.cell, gx, keep, *(s.to(gx.dtype) for s in state0), *weights)
        return out, final


def _known_forwards() -> tuple:
    """Forwards the scan computes: nn's own, and torch_xla's GRU (which its import puts in nn.GRU's place until
    compat.keep_torch_gru puts torch's back; a GRU built meanwhile is swapped too, for the hand-written backward)."""
    from torch.nn.modules import rnn

    xla_gru = sys.modules.get("torch_xla.experimental.gru")
    return rnn.LSTM.forward, rnn.GRU.forward, rnn.RNN.forward, *((xla_gru.GRU.forward,) if xla_gru else ())


def _kind(module: nn.Module) -> str:
    base = next(c for c in type(module).__mro__ if c.__module__.startswith("torch.nn.modules"))
    return f"nn.{base.__name__}" if base is type(module) else f"{type(module).__name__}, an nn.{base.__name__}"


def unrolled(module: nn.Module) -> tuple[str, str] | None:
    """(what the module is, what to do) when the scan cannot stand in for this recurrent module, else None."""
    kind = _kind(module)
    if isinstance(module, nn.RNNCellBase):
        return kind, "run nn.LSTM, nn.GRU or nn.RNN over the whole sequence instead, which XLA runs as one loop"
    if getattr(module, "proj_size", 0):
        return f"{kind} with proj_size={module.proj_size}", "without proj_size it would run as one XLA loop"
    own = [n for n, _ in module.named_parameters(recurse=False)]
    if (
        module.mode not in CELLS
        or (type(module).forward not in _known_forwards() and not getattr(module, "scan_semantics", False))
        or own != list(module._flat_weights_names)
        or any(True for _ in module.children())
        or any(True for _ in module.buffers())
        or module._forward_hooks
        or module._forward_pre_hooks
    ):
        return (
            f"{kind} with its own forward, parameters, buffers, submodules or hooks",
            "hold a plain nn.LSTM, nn.GRU or nn.RNN inside it instead, which XLA runs as one loop",
        )
    return None


def use_scan_rnn(module: nn.Module, verbose: bool = True) -> list[str]:
    """Replace, in place, every nn.LSTM, nn.GRU and nn.RNN inside `module` that ScanRNN can run; returns their paths.

    Any other recurrent module (a cell, an LSTM with proj_size, a subclass with its own forward) is left as it is,
    with one warning naming it: XLA traces it step by step, so its compile time grows with the sequence length.
    """
    swapped, scans, warned = [], {}, set()
    for prefix, parent in list(module.named_modules()):
        for name, child in list(parent._modules.items()):  # named_children() would skip a second name of a module
            path = f"{prefix}.{name}" if prefix else name
            if not isinstance(child, (nn.RNNBase, nn.RNNCellBase)):
                continue
            why = unrolled(child)
            if why is None:
                if id(child) not in scans:  # a module shared by two parents becomes one ScanRNN
                    scans[id(child)] = ScanRNN(child)
                setattr(parent, name, scans[id(child)])
                swapped.append(path)
            elif id(child) not in warned:
                warned.add(id(child))
                warnings.warn(
                    f"{path} ({why[0]}) is traced step by step on XLA, so its compile time grows with the "
                    f"sequence length; {why[1]}",
                    stacklevel=2,
                )
    if swapped and verbose:
        print(
            f"XLA: {', '.join(swapped)} run{'s' if len(swapped) == 1 else ''} as a scan over time "
            f"(compiled once whatever the length; same weights and state dict)",
            flush=True,
        )
    return swapped


def restore_rnn(module: nn.Module) -> list[str]:
    """Undo use_scan_rnn: each ScanRNN gives way to its nn module, which takes the current parameters.

    Moving a model to or from an XLA device creates new Parameter objects, so the
    ScanRNN's, not the ones the nn module was left with, hold the trained weights.
    """
    restored = []
    for prefix, parent in list(module.named_modules()):
        for name, child in list(parent._modules.items()):
            if isinstance(child, ScanRNN):
                setattr(parent, name, child.current())
                restored.append(f"{prefix}.{name}" if prefix else name)
    return restored
