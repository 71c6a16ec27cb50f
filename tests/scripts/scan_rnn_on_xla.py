"""Run by tests/test_scan_rnn.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import copy
import json

import torch
import torch_xla
import torch_xla.debug.metrics as met
from torch import nn
from torch.nn.modules import rnn  # nn's own classes: importing torch_xla puts its own GRU in nn.GRU's place
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from xla_train.runtime.torch_xla.recurrence import torch_xla_recurrence
from xla_train.runtime.layers.scan_rnn import ScanRNN, restore_rnn, use_scan_rnn

import helpers.packed as packed_cases
import helpers.rnn_states as rnn_states

torch.manual_seed(0)
dev, cpu = torch_xla.device(), torch.device("cpu")
found = {}


def leaves(hx, device, grad):
    if hx is None:
        return None
    if isinstance(hx, tuple):
        return tuple(leaves(h, device, grad) for h in hx)
    return hx.detach().to(device).requires_grad_(grad)


def run(module, x, hx, device, weights=None, autocast=False):
    # outputs and final states; with `weights`, the gradients of a loss that weights each of them at random (a None
    # weight: the loss does not read that one, so autograd hands the scan None for its gradient)
    x, hx = leaves(x, device, weights is not None), leaves(hx, device, weights is not None)
    with torch.autocast("xla", dtype=torch.bfloat16, enabled=autocast):  # around the forward, as Lightning's
        out, state = module(x) if hx is None else module(x, hx)
    got = {"out": out, **{f"state {i}": s for i, s in enumerate(state if isinstance(state, tuple) else [state])}}
    if weights is not None:
        sum((t * w.to(device)).sum() for t, w in zip(got.values(), weights) if w is not None).backward()
        got["d input"] = x.grad
        hxs = () if hx is None else hx if isinstance(hx, tuple) else (hx,)
        got.update({f"d hx {i}": h.grad for i, h in enumerate(hxs)})
        got.update({f"d {n}": p.grad for n, p in module.named_parameters()})
    torch_xla.sync()
    return {k: v.detach().cpu() for k, v in got.items()}


def differences(ref, got):
    assert ref.keys() == got.keys(), (list(ref), list(got))
    return {k: (list(got[k].shape), list(ref[k].shape), (ref[k] - got[k]).abs().max().item()) for k in ref}


CASES = {
    "2-layer bidirectional batch_first LSTM, hx given": (
        lambda: rnn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True, dropout=0.5),
        torch.randn(3, 9, 5),
        (torch.randn(4, 3, 7), torch.randn(4, 3, 7)),
    ),
    "2-layer bidirectional GRU, no hx": (
        lambda: rnn.GRU(5, 7, num_layers=2, bidirectional=True, dropout=0.5),
        torch.randn(9, 3, 5),
        None,
    ),
    "LSTM without bias, unbatched": (lambda: rnn.LSTM(5, 7, bias=False), torch.randn(9, 5), None),
    "GRU without bias, unbatched, hx given": (lambda: rnn.GRU(5, 7, bias=False), torch.randn(9, 5), torch.randn(1, 7)),
    "2-layer bidirectional relu RNN, batch_first": (
        lambda: rnn.RNN(5, 7, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True),
        torch.randn(3, 9, 5),
        None,
    ),
    "tanh RNN, hx given": (lambda: rnn.RNN(5, 7), torch.randn(9, 3, 5), torch.randn(1, 3, 7)),
}
found["equal"], scans = {}, {}
for name, (make, x, hx) in CASES.items():
    ref, twin = make().eval(), make()
    twin.load_state_dict(ref.state_dict())
    scan = ScanRNN(twin, torch_xla_recurrence).to(dev).eval()
    assert list(scan.state_dict()) == list(ref.state_dict()), name
    with torch.no_grad():  # as Lightning's sanity check does first
        run(scan, x, hx, dev)
    weights = [torch.randn_like(t) for t in run(ref, x, hx, cpu).values()]
    found["equal"][name] = differences(run(ref, x, hx, cpu, weights), run(scan, x, hx, dev, weights))
    scans[name] = scan, ref, x, hx, weights

# A loss that reads the final state alone (the IMDB model's), or the outputs alone.
found["partial"] = {}
for name, reads in ((list(CASES)[0], ("state 0",)), (list(CASES)[1], ("out",))):
    scan, ref, x, hx, weights = scans[name]
    part = [w if k in reads else None for k, w in zip(("out", "state 0", "state 1"), weights)]
    found["partial"][name] = differences(run(ref, x, hx, cpu, part), run(scan, x, hx, dev, part))

# Dropout between layers, in training mode only: layer 0's final state is untouched, the last layer's output too.
found["dropout"] = {}
for name in list(CASES)[:1]:  # the layer loop is the same for every cell
    scan, ref, x, hx, _ = scans[name]
    trained = run(scan.train(), x, hx, dev)
    evaluated = run(scan.eval(), x, hx, dev)
    found["dropout"][name] = {
        "finite": all(bool(torch.isfinite(v).all()) for v in trained.values()),
        "output change": (trained["out"] - evaluated["out"]).abs().max().item(),
        "last layer's state change": (trained["state 0"][2:] - evaluated["state 0"][2:]).abs().max().item(),
        "layer 0's state change": (trained["state 0"][:2] - evaluated["state 0"][:2]).abs().max().item(),
        "zero outputs": (trained["out"] == 0).float().mean().item(),
        "eval after train vs nn": (evaluated["out"] - run(ref, x, hx, cpu)["out"]).abs().max().item(),
    }

# A mask in every layer and direction: as if the masked steps were absent (a row may have none).
scan, ref, x, _, _ = scans[list(CASES)[0]]
mask = torch.rand(3, 9) < 0.6
mask[2] = False
with torch.no_grad():
    out, (h, c) = scan(x.to(dev), mask=mask.to(dev))
    out, h, c = out.cpu(), h.cpu(), c.cpu()
    errors = [out[~mask].abs().max().item()]
    for row in range(3):
        if mask[row].any():
            r_out, (r_h, r_c) = ref(x[row, mask[row]])
            errors += [(out[row, mask[row]] - r_out).abs().max().item(), (h[:, row] - r_h).abs().max().item()]
            errors.append((c[:, row] - r_c).abs().max().item())
        else:
            errors += [h[:, row].abs().max().item(), c[:, row].abs().max().item()]
found["mask"] = max(errors)

# A net that packs its padded batch (pack_padded_sequence, lengths .cpu(), enforce_sorted=False) computes what nn
# computes on the CPU, outputs, final states and gradients, with nothing read from the device before the sync; a
# second batch of other lengths compiles nothing new. tests/helpers/packed.py's cases, as on the CPU.
found["packed"] = {}
for name in packed_cases.CASES:
    ref, x, lengths, hx = packed_cases.case_inputs(name)
    net = copy.deepcopy(ref)
    use_scan_rnn(net, verbose=False, recurrence=torch_xla_recurrence)
    net.to(dev)
    weights = [torch.randn_like(v) for k, v in packed_cases.results(ref, x, lengths, hx, cpu).items() if k != "lengths"]
    torch_xla.sync()
    reads = met.metric_data("TransferFromDeviceTime") or (0,)
    got = packed_cases.results(net, x, lengths, hx, dev, weights)
    read = (met.metric_data("TransferFromDeviceTime") or (0,))[0] - reads[0]
    torch_xla.sync()
    compiles = met.metric_data("CompileTime")[0]
    packed_cases.results(net, x, lengths.flip(0), hx, dev, weights)  # other lengths, in another order
    torch_xla.sync()
    diffs = packed_cases.differences(packed_cases.results(ref, x, lengths, hx, cpu, weights), packed_cases.on_host(got))
    found["packed"][name] = {
        "diffs": diffs,
        "read": read,
        "compiled again": met.metric_data("CompileTime")[0] - compiles,
    }


# Started from a state of its own (an LSTM's h0 and c0, a GRU's h0): the gradients that reach it are nn's, for each
# layer and direction; every case in one graph.
cases, grads = rnn_states.state_cases(), {}
for name, (ref, x, states, weights) in cases.items():
    scan = ScanRNN(copy.deepcopy(ref), torch_xla_recurrence).to(dev)
    grads[name] = rnn_states.state_gradients(scan, x.to(dev), [s.to(dev) for s in states], [w.to(dev) for w in weights])
torch_xla.sync()
found["initial state"] = rnn_states.differences(cases, {k: [g.cpu() for g in v] for k, v in grads.items()})


# Lengths read on the host as numpy (.cpu().numpy()), which torch_xla can do (a step that reads the host): they
# reach pack_padded_sequence as values, and the scan computes nn's outputs.
class NumpyLengths(packed_cases.PackedNet):
    def forward(self, x, lengths, hx=None):
        packed = pack_padded_sequence(x, lengths.cpu().numpy(), batch_first=True, enforce_sorted=False)
        out, state = self.rnn(packed, hx)
        return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0], state[0]


ref, x, lengths, _ = packed_cases.case_inputs("LSTM, 1 layer, batch_first")
ref = NumpyLengths(ref.rnn)
net = copy.deepcopy(ref)
use_scan_rnn(net, verbose=False, recurrence=torch_xla_recurrence)
with torch.no_grad():
    got = [t.cpu() for t in net.to(dev)(x.to(dev), lengths.to(dev))]
    found["numpy lengths"] = [(a - b).abs().max().item() for a, b in zip(got, ref(x, lengths))]

# A PackedSequence made outside the net (its rows the real steps only) runs as the scan by its batch_sizes.
scan, ref, x, _, _ = scans["LSTM without bias, unbatched"]
batch = torch.randn(9, 3, 5)
packed = pack_padded_sequence(batch, torch.tensor([9, 4, 6]), enforce_sorted=False)
with torch.no_grad():
    got, (h, c) = scan(packed.to(dev))
    r_out, (r_h, r_c) = ref(packed)
found["packed outside"] = [
    (got.data.cpu() - r_out.data).abs().max().item(),
    (h.cpu() - r_h).abs().max().item(),
    list(got.data.shape),
]

# Under bf16 autocast (precision=bf16 on XLA) the recurrence keeps float32 (no bias to promote the projection).
ref, x = rnn.LSTM(5, 7, bias=False, batch_first=True), torch.randn(3, 9, 5)
scan, hx = ScanRNN(rnn.LSTM(5, 7, bias=False, batch_first=True), torch_xla_recurrence).to(dev), None
scan.load_state_dict(ref.state_dict())
weights = [torch.randn_like(t) for t in run(ref, x, hx, cpu).values()]
try:
    mixed = run(scan, x, hx, dev, weights, autocast=True)
    full = run(ref, x, hx, cpu, weights)
    found["autocast"] = {
        "finite": all(bool(torch.isfinite(v).all()) for v in mixed.values()),
        "dtypes": sorted({str(v.dtype) for v in mixed.values()}),
        "output error": (mixed["out"] - full["out"]).abs().max().item(),
    }
except RuntimeError as e:  # a carry whose dtype changes fails to build the While loop
    found["autocast"] = {"error": str(e)[:300]}

# torch_xla's own GRU (what nn.GRU is once torch_xla is imported) is swapped too, and comes back.
holder = nn.Module()
holder.gru = nn.GRU(5, 7)
xla_gru = type(holder.gru)
found["torch_xla's GRU"] = [
    xla_gru is not rnn.GRU,
    use_scan_rnn(holder, verbose=False, recurrence=torch_xla_recurrence),
    restore_rnn(holder),
    type(holder.gru) is xla_gru,
]


# Train on the device, come back to the CPU: the nn modules hold the trained weights, under the same keys.
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = rnn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True, dropout=0.2)
        self.gru = rnn.GRU(12, 4, batch_first=True)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, h = self.gru(y)
        return self.head(y[:, -1]) + h[-1].sum(-1, keepdim=True)


net = Net()
lstm, gru, keys = net.lstm, net.gru, list(net.state_dict())
initial = {k: v.clone() for k, v in net.state_dict().items()}
kept = {"swapped": use_scan_rnn(net, verbose=False, recurrence=torch_xla_recurrence)}
kept["keys after the swap"] = list(net.state_dict()) == keys
net.to(dev).train()
opt = torch.optim.SGD(net.parameters(), lr=0.5)
x = torch.randn(3, 9, 5)
net(x.to(dev)).square().sum().backward()
opt.step()
torch_xla.sync()
kept["keys on the device"] = list(net.state_dict()) == keys
with torch.no_grad():
    expected = net.eval()(x.to(dev)).cpu()
net.cpu()  # as Lightning's teardown does, then restore_rnn as the strategy's
kept["restored"] = restore_rnn(net)
kept["the same objects"] = net.lstm is lstm and net.gru is gru
kept["keys after restore"] = list(net.state_dict()) == keys
kept["weights moved"] = min((v - initial[k]).abs().max().item() for k, v in net.state_dict().items())
with torch.no_grad():
    kept["error"] = (net(x) - expected).abs().max().item()
found["restore"] = kept


# Compile size: the forward and backward graph of a user's net with a 2-layer nn.LSTM, at two lengths.
class UserNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = rnn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def graph(scan, length):
    net = UserNet()
    if scan:
        use_scan_rnn(net, verbose=False, recurrence=torch_xla_recurrence)
    net.to(dev)
    loss = net(torch.randn(4, length, 8, device=dev)).sum()
    loss.backward()
    tensors = [loss] + [p.grad for p in net.parameters()]
    hlo = torch_xla._XLAC._get_xla_tensors_hlo(tensors)
    size = sum(1 for line in hlo.splitlines() if " = " in line)  # HLO instructions, While bodies included
    if not scan or size > 10000:
        return size, None  # never compiled: unrolled, it takes minutes (about 150 s at length 100, 2 CPU cores)
    before = (met.metric_data("CompileTime") or (0, 0))[1]
    torch_xla.sync()
    return size, round(((met.metric_data("CompileTime") or (0, 0))[1] - before) / 1e9, 2)


found["hlo"] = {f"{kind} {t}": graph(kind == "scan", t) for kind in ("scan", "unrolled") for t in (100, 400)}
print(json.dumps(found))
