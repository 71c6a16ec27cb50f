"""Recurrent layers fed as PyTorch's tutorials feed them, through pack_padded_sequence, and what nn computes for them:
shared by the CPU check (tests/test_packed.py), torch_xla's (tests/scripts/scan_rnn_on_xla.py) and JAX's
(tests/jax_engine_check.py), so that the three compare the same cases the same way."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import rnn  # nn's own classes: importing torch_xla puts its own GRU in nn.GRU's place
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

LENGTHS = [5, 2, 7, 3]  # unsorted, one full length: the sort and its undoing are not the identity
STEPS = 7

# name: (module, hx given): every cell at one and two layers, one and two directions, batch-first or not
CASES = {
    "LSTM, 1 layer, batch_first": (lambda: rnn.LSTM(3, 5, batch_first=True), False),
    "LSTM, 2 layers bidirectional, hx given": (lambda: rnn.LSTM(3, 5, num_layers=2, bidirectional=True), True),
    "GRU, 1 layer bidirectional, batch_first": (lambda: rnn.GRU(3, 5, bidirectional=True, batch_first=True), False),
    "GRU, 2 layers, hx given": (lambda: rnn.GRU(3, 5, num_layers=2), True),
}


class PackedNet(nn.Module):
    """pack_padded_sequence (lengths .cpu(), enforce_sorted=False) -> the layer -> pad_packed_sequence."""

    def __init__(self, layer: nn.RNNBase):
        super().__init__()
        self.rnn = layer

    def forward(self, x, lengths, hx=None):
        first = self.rnn.batch_first
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=first, enforce_sorted=False)
        out, state = self.rnn(packed, hx)
        out, out_lengths = pad_packed_sequence(out, batch_first=first, total_length=x.shape[1 if first else 0])
        return out, state, out_lengths


def case_inputs(name: str, seed: int = 0):
    """(net, x, lengths, hx) of a case; the padding of x is noise, which a packed layer never reads."""
    make, with_hx = CASES[name]
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = PackedNet(make()).eval()
    n = len(LENGTHS)
    x = torch.randn((n, STEPS, 3) if net.rnn.batch_first else (STEPS, n, 3), generator=g)
    layers = net.rnn.num_layers * (2 if net.rnn.bidirectional else 1)
    hx = None
    if with_hx:
        hx = torch.randn(layers, n, 5, generator=g)
        hx = (hx, torch.randn(layers, n, 5, generator=g)) if net.rnn.mode == "LSTM" else hx
    return net, x, torch.tensor(LENGTHS), hx


def results(net, x, lengths, hx, device, weights=None) -> dict:
    """The padded outputs, final states and lengths of `net` on `device`; with `weights` (from a first call), also
    the gradients of a loss weighting each at random, for x, hx and every parameter; all on the CPU."""
    grad = weights is not None
    x = x.detach().to(device).requires_grad_(grad)
    hxs = () if hx is None else hx if isinstance(hx, tuple) else (hx,)
    hxs = tuple(h.detach().to(device).requires_grad_(grad) for h in hxs)
    given = None if hx is None else hxs if isinstance(hx, tuple) else hxs[0]
    out, state, out_lengths = net(x, lengths.to(device), given)
    states = state if isinstance(state, tuple) else (state,)
    got = {"out": out, **{f"state {i}": s for i, s in enumerate(states)}}
    if grad:
        sum((t * w.to(device)).sum() for t, w in zip(got.values(), weights)).backward()
        got["d x"] = x.grad
        got.update({f"d hx {i}": h.grad for i, h in enumerate(hxs)})
        got.update({f"d {n}": p.grad for n, p in net.named_parameters()})
        net.zero_grad()
    got["lengths"] = out_lengths
    return got


def on_host(found: dict) -> dict:
    return {k: v.detach().cpu() for k, v in found.items()}


def differences(ref: dict, got: dict) -> dict:
    """{name: (shape, nn's shape, largest difference)}."""
    assert ref.keys() == got.keys(), (list(ref), list(got))
    return {
        k: (list(got[k].shape), list(ref[k].shape), (ref[k].double() - got[k].double()).abs().max().item()) for k in ref
    }


def eager_recurrence(cell, chunk, gx, keep, *tensors):
    """ScanRNN's recurrence (runtime/layers/scan_rnn.py, _Recurrence's contract) as a Python loop of the cell's own
    step, differentiated by autograd: the scan's arithmetic on the CPU, with no XLA."""
    carry, saved = tuple(tensors), []
    for t in range(gx.shape[0]):
        carry, (s,) = cell.step(carry, (gx[t], keep[t]))
        saved.append(s)
    return (cell.outputs((torch.stack(saved),), keep, carry), *carry[: cell.states])
