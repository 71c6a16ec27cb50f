"""Run by tests/test_imdb.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import torch
import torch_xla
from xla_train.runtime.torch_xla.recurrence import torch_xla_recurrence
from xla_train.models.lstm import MaskedLSTM, SentimentLSTM
from xla_train.runtime.layers.scan_rnn import ScanRNN, restore_rnn, use_scan_rnn

torch.manual_seed(0)
dev = torch_xla.device()


def grads(lstm, x, mask, device, w, wh):
    x = x.detach().clone().to(device).requires_grad_()
    out, (h, c) = lstm(x, mask=None if mask is None else mask.to(device))
    ((out * w.to(device)).sum() + (h[0] * wh.to(device)).sum() + c.sum()).backward()
    result = [out, h, c, x.grad] + [p.grad for p in lstm.parameters()]
    torch_xla.sync()
    return [t.detach().cpu() for t in result]


x, w, wh = torch.randn(4, 12, 5), torch.randn(4, 12, 7), torch.randn(4, 7)
mask = torch.ones(4, 12, dtype=torch.bool)
mask[0, :5] = False
mask[1] = False
mask[2, :11] = False
for m in (mask, None):
    cpu = MaskedLSTM(5, 7, batch_first=True)
    xla = MaskedLSTM(5, 7, batch_first=True)
    xla.load_state_dict(cpu.state_dict())
    scan = ScanRNN(xla, torch_xla_recurrence).to(dev)
    assert list(scan.state_dict()) == list(cpu.state_dict())
    with torch.no_grad():  # as Lightning's sanity check does: must not leave a gradient-less graph in scan's cache
        scan(x.to(dev), mask=None if m is None else m.to(dev))
    ref, got = grads(cpu, x, m, torch.device("cpu"), w, wh), grads(scan, x, m, dev, w, wh)
    for name, a, b in zip(["out", "h", "c", "dx"] + [n for n, _ in cpu.named_parameters()], ref, got):
        err = (a - b).abs().max().item()
        assert err < 1e-5, (name, m is None, err)

net = SentimentLSTM(vocab_size=50, embed_dim=8, hidden_size=6).eval()
with torch.no_grad():  # non-zero biases and padding embedding: a padding step processed would move the state
    for p in (net.lstm.bias_ih_l0, net.lstm.bias_hh_l0):
        p.uniform_(-1.0, 1.0)
    net.embedding.weight[0].uniform_(-0.5, 0.5)
keys = list(net.state_dict())
ids = torch.randint(2, 50, (3, 10))
with torch.no_grad():
    expected = net(torch.nn.functional.pad(ids, (6, 0)))
    unmasked = [
        torch.nn.LSTM.forward(net.lstm, net.embedding(torch.nn.functional.pad(ids, (p, 0))))[1][0] for p in (0, 6)
    ]
    assert (unmasked[0] - unmasked[1]).abs().amax(-1).min().item() > 1e-3  # hard data: padding stepped through shows
    assert (
        use_scan_rnn(net, recurrence=torch_xla_recurrence) == ["lstm"]
        and isinstance(net.lstm, ScanRNN)
        and list(net.state_dict()) == keys
    )
    net.to(dev)
    for pad in (0, 6, 30):
        got = net(torch.nn.functional.pad(ids, (pad, 0)).to(dev)).cpu()
        assert (got - expected).abs().max().item() < 1e-5, pad
    net.lstm.weight_hh_l0.mul_(0.5)  # "training" on the device
    padded = torch.nn.functional.pad(ids, (6, 0))
    expected = net(padded.to(dev)).cpu()
    net.cpu()  # as Lightning's teardown does, then restore_rnn as the strategy's
    assert restore_rnn(net) == ["lstm"] and type(net.lstm) is MaskedLSTM and list(net.state_dict()) == keys
    assert (net(padded) - expected).abs().max().item() < 1e-5  # the device's weights, on nn.LSTM, on the CPU

# Every XLA strategy swaps the scan in on the device and nn.LSTM back at teardown (xla_mp as in a spawned worker).
from xla_train.runtime.torch_xla.accelerators import PJRTAccelerator
from xla_train.runtime.torch_xla.multiprocess import XLAMultiProcessStrategy
from xla_train.runtime.torch_xla.strategy import XLASingleDeviceStrategy
from xla_train.training.module import Classifier

for strategy in (XLASingleDeviceStrategy(0, PJRTAccelerator()), XLAMultiProcessStrategy(PJRTAccelerator())):
    strategy._launched = True
    task = Classifier(SentimentLSTM(vocab_size=50, embed_dim=8, hidden_size=6))
    strategy.connect(task)
    strategy.model_to_device()
    assert isinstance(task.net.lstm, ScanRNN) and task.net.lstm.weight_hh_l0.device.type == "xla", strategy
    strategy.teardown()
    assert type(task.net.lstm) is MaskedLSTM and task.net.lstm.weight_hh_l0.device.type == "cpu", strategy
print("ok")
