"""Recurrent layers started from a state of their own (an LSTM's h0 and c0, a GRU's h0), as a seq2seq decoder starts
from its encoder's final state, and the gradients that reach that state: the cases torch_xla's check
(tests/scripts/scan_rnn_on_xla.py) and JAX's (tests/test_scan_rnn.py) run, and nn's answer on the CPU."""

from __future__ import annotations

import torch
from torch.nn.modules import rnn  # nn's own classes: importing torch_xla puts its own GRU in nn.GRU's place

# Two layers in both directions: the initial state holds a slice for each of the four scans.
MODES = {"LSTM, 2 layers bidirectional": "LSTM", "GRU, 2 layers bidirectional": "GRU"}


def given(states: list[torch.Tensor]):
    """The hx argument nn takes: (h0, c0) for an LSTM, h0 for a GRU."""
    return tuple(states) if len(states) == 2 else states[0]


def state_cases(seed: int = 0) -> dict[str, tuple]:
    """{name: (net, x, states, weights)}: the weights, one per output and final state, make the loss."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cases = {}
    for name, mode in MODES.items():
        net = getattr(rnn, mode)(3, 4, num_layers=2, bidirectional=True).eval()
        states = [torch.randn(4, 2, 4, generator=g) for _ in range(2 if mode == "LSTM" else 1)]
        x = torch.randn(5, 2, 3, generator=g)
        with torch.no_grad():
            out, final = net(x, given(states))
        outputs = (out, *(final if isinstance(final, tuple) else (final,)))
        cases[name] = net, x, states, [torch.randn(t.shape, generator=g) for t in outputs]
    return cases


def state_gradients(net, x, states, weights) -> list[torch.Tensor]:
    """The gradient, for each initial state, of the loss that weights the outputs and the final states (autograd,
    on the tensors' device)."""
    states = [s.detach().clone().requires_grad_() for s in states]
    out, final = net(x, given(states))
    finals = final if isinstance(final, tuple) else (final,)
    sum((t * w).sum() for t, w in zip((out, *finals), weights)).backward()
    return [s.grad for s in states]


def differences(cases: dict, found: dict[str, list[torch.Tensor]]) -> dict[str, list[list[float]]]:
    """{name: [[largest difference from nn's on the CPU, nn's smallest slice (a layer and direction)], per state]}."""
    out = {}
    for name, (net, x, states, weights) in cases.items():
        expected = state_gradients(net, x, states, weights)
        out[name] = [
            [(want - got).abs().max().item(), want.abs().amax((1, 2)).min().item()]
            for want, got in zip(expected, found[name])
        ]
    return out
