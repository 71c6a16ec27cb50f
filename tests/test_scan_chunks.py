"""runtime/engine/torch_xla/scan_loop.py and the chunked scans of runtime/layers/scan_rnn.py: K time steps per While iteration compute what
one step per iteration computes, forward and backward, also where K does not divide the sequence length (masked
steps are put in front) and with front padding masked, and the loop is built once per body and shapes.

The XLA checks run in one subprocess (the XLA runtime is fixed for a process's life) and report as JSON.
"""

from __future__ import annotations


import pytest

from helpers import script_json

ON_XLA = r"""
import json
import torch, torch_xla
from torch.nn.modules import rnn  # nn's own classes: importing torch_xla puts its own GRU in nn.GRU's place
from xla_train.runtime.engine.torch_xla import scan_loop as loop_module
from xla_train.runtime.engine.torch_xla.scan_loop import scan_loop
from xla_train.runtime.layers.scan_rnn import ScanRNN

torch.manual_seed(0)
dev = torch_xla.device()
found = {}


# scan_loop against a Python loop: a body of K=3 steps over T=9 and 6, forwards and reversed (the reversed loop
# visits the last chunk first, and its body takes the chunk's steps last first).
def forwards(carry, steps, order=range):
    (acc, w), outputs = carry, [None] * len(steps)
    for j in order(len(steps)):
        x, y = steps[j]
        acc = acc * w + x * y
        outputs[j] = (acc, x - acc)
    return (acc, w), outputs


def backwards(carry, steps):
    return forwards(carry, steps, lambda k: reversed(range(k)))


builds = []
build = loop_module._build
loop_module._build = lambda *args: builds.append(args[0]) or build(*args)
found["loop"] = {}
for t in (9, 6):  # the same body at another length builds another loop
    x, y, acc0, w = torch.randn(t, 2, 3), torch.randn(t, 2, 3), torch.randn(2, 3), torch.rand(2, 3)
    for reverse in (False, True):
        acc, outs = acc0, [None] * t
        for i in reversed(range(t)) if reverse else range(t):
            acc = acc * w + x[i] * y[i]
            outs[i] = (acc, x[i] - acc)
        body, before = backwards if reverse else forwards, len(builds)
        for _ in range(2):
            (got, _), ys = scan_loop(body, 3, (acc0.to(dev), w.to(dev)), (x.to(dev), y.to(dev)), reverse=reverse)
        expected = [torch.stack([o[m] for o in outs]) for m in range(2)]
        found["loop"][f"T={t}, reverse={reverse}"] = {
            "carry": (got.cpu() - acc).abs().max().item(),
            "ys": max((g.cpu() - e).abs().max().item() for g, e in zip(ys, expected)),
            "built": len(builds) - before,
        }


def run(module, x, hx, mask, weights=None):
    # outputs, final states and, with `weights`, the gradients of a loss weighting each of them at random
    x = x.detach().to(dev).requires_grad_(weights is not None)
    hx = None if hx is None else tuple(h.detach().to(dev).requires_grad_(weights is not None) for h in hx)
    out, state = module(x, hx if hx is None or len(hx) == 2 else hx[0], mask=mask.to(dev))
    got = {"out": out, **{f"state {i}": s for i, s in enumerate(state if isinstance(state, tuple) else [state])}}
    if weights is not None:
        sum((t * w.to(dev)).sum() for t, w in zip(got.values(), weights)).backward()
        got.update({"d input": x.grad, **{f"d hx {i}": h.grad for i, h in enumerate(hx or ())}})
        got.update({f"d {n}": p.grad for n, p in module.named_parameters()})
    torch_xla.sync()
    return {k: v.detach().cpu() for k, v in got.items()}


def front_padded(n, t):
    # row 0 without padding, row 1 all padding, the others padded at the front by 1 to t - 1 steps
    lead = torch.tensor([0, t] + [1 + i % (t - 1) for i in range(n - 2)])
    return torch.arange(t)[None, :] >= lead[:, None]


CASES = {  # T = 11 and 7: chunk 3 leaves 2 and 1 steps over
    "2-layer bidirectional batch_first LSTM, hx given": (
        lambda: rnn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True),
        torch.randn(4, 11, 5), (torch.randn(4, 4, 6), torch.randn(4, 4, 6)), front_padded(4, 11),
    ),
    "2-layer bidirectional GRU, hx given": (
        lambda: rnn.GRU(5, 6, num_layers=2, bidirectional=True),
        torch.randn(7, 4, 5), (torch.randn(4, 4, 6),), front_padded(4, 7),
    ),
    "bidirectional tanh RNN, batch_first": (
        lambda: rnn.RNN(5, 6, bidirectional=True, batch_first=True),
        torch.randn(4, 11, 5), None, front_padded(4, 11),
    ),
}
found["chunks"] = {}
for name, (make, x, hx, mask) in CASES.items():
    one = ScanRNN(make()).to(dev).eval()
    one.chunk = 1
    reference = run(one, x, hx, mask)
    weights = [torch.randn_like(v) for v in reference.values()]
    reference = run(one, x, hx, mask, weights)
    for chunk in (3, 16):  # 16: longer than the sequence
        twin = ScanRNN(make()).to(dev).eval()
        twin.load_state_dict(one.state_dict())
        twin.chunk = chunk
        got = run(twin, x, hx, mask, weights)
        found["chunks"][f"{name}, chunk {chunk}"] = {
            k: (list(got[k].shape), list(reference[k].shape), (got[k] - reference[k]).abs().max().item())
            for k in reference
        }


# The graph of a 2-layer LSTM's, GRU's and RNN's forward and backward, chunk 4, at lengths it divides and does not.
def hlo_size(make, length, chunk=4):
    net = ScanRNN(make()).to(dev)
    net.chunk = chunk
    x = torch.randn(4, length, 8).to(dev).requires_grad_()  # made on the CPU: no device RNG ops in the graph
    out, state = net(x)
    (out[:, -1].sum() + (state[1] if isinstance(state, tuple) else state).sum()).backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([x.grad] + [p.grad for p in net.parameters()])
    return sum(1 for line in hlo.splitlines() if " = " in line)  # HLO instructions, While bodies included


found["hlo"] = {}
for name, make in {
    "LSTM": lambda: rnn.LSTM(8, 16, num_layers=2, batch_first=True),
    "GRU": lambda: rnn.GRU(8, 16, num_layers=2, batch_first=True),
    "RNN": lambda: rnn.RNN(8, 16, num_layers=2, batch_first=True),
}.items():
    found["hlo"][name] = {t: hlo_size(make, t) for t in (100, 400, 401)}
    found["hlo"][name]["chunk 1"] = hlo_size(make, 401, 1)
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def on_xla() -> dict:
    return script_json(ON_XLA)


def test_the_loop_runs_k_steps_per_iteration_in_order_and_is_built_once(on_xla):
    """Carry and per-step outputs as a Python loop computes them, forwards and reversed, at two lengths; the
    second call with the same body and shapes reuses the built While computation."""
    assert len(on_xla["loop"]) == 4
    for case, found in on_xla["loop"].items():
        assert found["carry"] < 1e-5 and found["ys"] < 1e-5, (case, found)
        assert found["built"] == 1, (case, found)


def test_chunked_scans_compute_what_one_step_per_iteration_computes(on_xla):
    """Outputs, final states and the gradients of the input, hx and every parameter, for LSTM, GRU and RNN (two
    layers, both directions), front padding masked, at lengths the chunk does not divide."""
    assert len(on_xla["chunks"]) == 6
    for case, found in on_xla["chunks"].items():
        assert {"out", "state 0", "d input", "d weight_hh_l0", "d weight_ih_l0_reverse"} <= set(found), case
        for name, (shape, reference_shape, error) in found.items():
            assert shape == reference_shape and error < 1e-5, (case, name, shape, reference_shape, error)


def test_the_chunked_graph_does_not_grow_with_the_sequence_length(on_xla):
    """Counted in HLO instructions (a clock depends on the machine's load): one chunk of K steps is traced, whatever
    T and T % K, for every cell; the chunk of 4 is larger than one step's."""
    assert set(on_xla["hlo"]) == {"LSTM", "GRU", "RNN"}
    for cell, sizes in on_xla["hlo"].items():
        assert sizes["100"] == sizes["400"] == sizes["401"], (cell, sizes)
        assert sizes["100"] > 1.5 * sizes["chunk 1"], (cell, sizes)


def test_xla_train_scan_chunk_sets_the_chunk_of_every_scan_built_after(monkeypatch):
    from torch import nn

    from xla_train.errors import ConfigError
    from xla_train.runtime.layers.scan_rnn import CHUNK, CHUNK_ENV, ScanRNN

    monkeypatch.delenv(CHUNK_ENV, raising=False)
    assert ScanRNN(nn.LSTM(3, 4)).chunk == CHUNK
    monkeypatch.setenv(CHUNK_ENV, "8")
    assert ScanRNN(nn.GRU(3, 4)).chunk == 8
    for bad in ("0", "-2", "eight", "2.5"):
        monkeypatch.setenv(CHUNK_ENV, bad)
        with pytest.raises(ConfigError, match=f"{CHUNK_ENV}={bad!r} is not a number of time steps"):
            ScanRNN(nn.LSTM(3, 4))
