"""The LSTM recurrence as XLA While loops, swapped in for nn.LSTM when a model runs on XLA.

nn.LSTM on XLA is traced step by step, so its compile time grows with the sequence length; here the input
projection is one matmul and one traced recurrent step is looped by torch_xla's `scan`. The backward is a second
scan written out, not scan's own autograd, which caches graphs whatever requires_grad and needs torchax under
SPMD; both loops are batch-parallel, so no collective runs inside a loop. The recurrent weight rides in each
scan's carry: a closure over it fails to trace. ScanLSTM holds the nn.LSTM's own Parameters under their names,
so checkpoints load into nn.LSTM, and restore_lstm puts it back (docs/hardware.md, "The LSTM on XLA").
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

PARAMS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def _forward_step(carry, xs):
    """One step: new state, and what the backward step needs (the previous state, gates, tanh(c))."""
    h, c, w_hh = carry
    gx, keep = xs  # gx: x_t @ W_ih^T + biases (N, 4H); keep: (N, 1) bool
    a = gx + h @ w_hh.t()
    hidden = h.shape[1]
    s = torch.sigmoid(a)
    i, f, o = s[:, :hidden], s[:, hidden : 2 * hidden], s[:, 3 * hidden :]  # nn.LSTM's gate order: i, f, g, o
    g = torch.tanh(a[:, 2 * hidden : 3 * hidden])
    c_new = f * c + i * g
    tc = torch.tanh(c_new)
    h_new = o * tc
    acts = torch.cat([i, f, g, o], dim=1)
    return (torch.where(keep, h_new, h), torch.where(keep, c_new, c), w_hh), (h, c, acts, tc)


def _backward_step(carry, xs):
    """One step back: gradients w.r.t. the previous state, and the gate pre-activations' gradient."""
    dh, dc, w_hh = carry  # w.r.t. the state after this step
    dy, keep, c_prev, acts, tc = xs
    hidden = dh.shape[1]
    i, f, g, o = (acts[:, k * hidden : (k + 1) * hidden] for k in range(4))
    zero = torch.zeros_like(dh)
    dh_new = torch.where(keep, dh + dy, zero)  # a masked step passed the state through untouched
    dc_new = torch.where(keep, dc, zero) + dh_new * o * (1 - tc * tc)
    d_gates = torch.cat(
        [dc_new * g * i * (1 - i), dc_new * c_prev * f * (1 - f), dc_new * i * (1 - g * g), dh_new * tc * o * (1 - o)],
        dim=1,
    )
    dh_prev = d_gates @ w_hh + torch.where(keep, zero, dh)
    dc_prev = dc_new * f + torch.where(keep, zero, dc)
    return (dh_prev, dc_prev, w_hh), d_gates


class _Recurrence(torch.autograd.Function):
    """(gx (T, N, 4H), keep (T, N, 1), h0, c0, W_hh) -> (outputs (T, N, H), h_T, c_T)."""

    @staticmethod
    def forward(ctx, gx, keep, h0, c0, w_hh):
        from torch_xla.experimental.scan import scan

        (h, c, _), (h_prev, c_prev, acts, tc) = scan(_forward_step, (h0, c0, w_hh), (gx, keep), is_fn_pure=True)
        hidden = h.shape[1]
        out = torch.where(keep, acts[..., 3 * hidden :] * tc, torch.zeros_like(tc))
        ctx.save_for_backward(keep, w_hh, h_prev, c_prev, acts, tc)
        return out, h, c

    @staticmethod
    def backward(ctx, d_out, d_h, d_c):
        from torch_xla.experimental.scan import scan

        keep, w_hh, h_prev, c_prev, acts, tc = ctx.saved_tensors
        back = [torch.flip(t, [0]) for t in (d_out, keep, c_prev, acts, tc)]  # scan runs forwards only
        with torch.no_grad():
            (dh0, dc0, _), d_gates = scan(_backward_step, (d_h, d_c, w_hh), tuple(back), is_fn_pure=True)
        d_gates = torch.flip(d_gates, [0])
        d_w_hh = torch.einsum("tng,tnh->gh", d_gates, h_prev)  # one matmul over all steps, outside the loop
        return d_gates, None, dh0, dc0, d_w_hh


def supported(lstm: nn.LSTM) -> bool:
    return lstm.num_layers == 1 and not lstm.bidirectional and not lstm.proj_size


class ScanLSTM(nn.Module):
    """nn.LSTM's forward (one layer, unidirectional), plus MaskedLSTM's `mask`, run as two scans."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        if not supported(lstm):
            raise ValueError("ScanLSTM runs one-layer, unidirectional LSTMs without projection")
        self.input_size, self.hidden_size = lstm.input_size, lstm.hidden_size
        self.batch_first, self.bias = lstm.batch_first, lstm.bias
        for name in PARAMS:
            if hasattr(lstm, name):
                setattr(self, name, getattr(lstm, name))  # the same Parameter, not a copy
        self.__dict__["replaced"] = lstm  # kept for restore_lstm, outside the module tree and the state dict

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, batch_first={self.batch_first}, bias={self.bias}"

    def forward(self, input, hx=None, mask=None):  # noqa: A002 (nn.LSTM's argument name)
        x = input.transpose(0, 1) if self.batch_first else input  # (T, N, E)
        t, n, _ = x.shape
        gx = x @ self.weight_ih_l0.t()
        if self.bias:
            gx = gx + (self.bias_ih_l0 + self.bias_hh_l0)
        if mask is None:
            keep = torch.ones(t, n, 1, dtype=torch.bool, device=x.device)
        else:
            keep = mask.to(torch.bool).transpose(0, 1)[..., None]
        if hx is None:
            h0 = torch.zeros(n, self.hidden_size, dtype=gx.dtype, device=x.device)
            c0 = torch.zeros(n, self.hidden_size, dtype=gx.dtype, device=x.device)
        else:
            h0, c0 = hx[0][0], hx[1][0]
        ys, h, c = _Recurrence.apply(gx, keep, h0, c0, self.weight_hh_l0)
        out = ys.transpose(0, 1) if self.batch_first else ys
        return out, (h[None], c[None])


def use_scan_lstm(module: nn.Module, verbose: bool = True) -> list[str]:
    """Replace, in place, every nn.LSTM inside `module` that ScanLSTM can run; returns their names.

    An LSTM it cannot run (several layers, bidirectional) is left as it is, with a
    warning: XLA would unroll it over time.
    """
    swapped = []
    for prefix, parent in list(module.named_modules()):
        for name, child in list(parent.named_children()):
            path = f"{prefix}.{name}" if prefix else name
            if not isinstance(child, nn.LSTM):
                continue
            if supported(child):
                setattr(parent, name, ScanLSTM(child))
                swapped.append(path)
            else:
                warnings.warn(
                    f"{path}: a {child.num_layers}-layer{' bidirectional' if child.bidirectional else ''} "
                    f"nn.LSTM stays unrolled on XLA; its compile time grows with the sequence length",
                    stacklevel=2,
                )
    if swapped and verbose:
        print(
            f"XLA: {', '.join(swapped)} run{'s' if len(swapped) == 1 else ''} as a scan over time "
            f"(compiled once whatever the length; same weights as nn.LSTM)",
            flush=True,
        )
    return swapped


def restore_lstm(module: nn.Module) -> list[str]:
    """Undo use_scan_lstm: each ScanLSTM gives way to its nn.LSTM, which takes the current parameters.

    Moving a model to or from an XLA device creates new Parameter objects, so the
    ScanLSTM's, not the ones the nn.LSTM was left with, hold the trained weights.
    """
    restored = []
    for prefix, parent in list(module.named_modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, ScanLSTM):
                lstm = child.replaced
                for p in PARAMS:
                    if hasattr(child, p):
                        setattr(lstm, p, getattr(child, p))  # nn.LSTM keeps its flat weight list in step
                setattr(parent, name, lstm)
                restored.append(f"{prefix}.{name}" if prefix else name)
    return restored
