"""Run by tests/test_scan_chunks.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import torch
import torch_xla
from torch.nn.modules import rnn  # nn's own classes: importing torch_xla puts its own GRU in nn.GRU's place
from xla_train.runtime.torch_xla.recurrence import torch_xla_recurrence
from xla_train.runtime.torch_xla import scan_loop as loop_module
from xla_train.runtime.torch_xla.scan_loop import scan_loop
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
        torch.randn(4, 11, 5),
        (torch.randn(4, 4, 6), torch.randn(4, 4, 6)),
        front_padded(4, 11),
    ),
    "2-layer bidirectional GRU, hx given": (
        lambda: rnn.GRU(5, 6, num_layers=2, bidirectional=True),
        torch.randn(7, 4, 5),
        (torch.randn(4, 4, 6),),
        front_padded(4, 7),
    ),
    "bidirectional tanh RNN, batch_first": (
        lambda: rnn.RNN(5, 6, bidirectional=True, batch_first=True),
        torch.randn(4, 11, 5),
        None,
        front_padded(4, 11),
    ),
}
found["chunks"] = {}
for name, (make, x, hx, mask) in CASES.items():
    one = ScanRNN(make(), torch_xla_recurrence).to(dev).eval()
    one.chunk = 1
    reference = run(one, x, hx, mask)
    weights = [torch.randn_like(v) for v in reference.values()]
    reference = run(one, x, hx, mask, weights)
    for chunk in (3, 16):  # 16: longer than the sequence
        twin = ScanRNN(make(), torch_xla_recurrence).to(dev).eval()
        twin.load_state_dict(one.state_dict())
        twin.chunk = chunk
        got = run(twin, x, hx, mask, weights)
        found["chunks"][f"{name}, chunk {chunk}"] = {
            k: (list(got[k].shape), list(reference[k].shape), (got[k] - reference[k]).abs().max().item())
            for k in reference
        }


# The graph of a 2-layer LSTM's, GRU's and RNN's forward and backward, chunk 4, at lengths it divides and does not.
def hlo_size(make, length, chunk=4):
    net = ScanRNN(make(), torch_xla_recurrence).to(dev)
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
