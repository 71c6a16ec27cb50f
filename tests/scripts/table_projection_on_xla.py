"""Run by tests/test_table_projection.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import torch
import torch_xla
from torch import nn
from torch.nn.modules import rnn  # nn's own classes: importing torch_xla puts its own GRU in nn.GRU's place
import xla_train.runtime.layers.scan_rnn as scan_rnn
from xla_train.runtime.torch_xla.recurrence import torch_xla_recurrence
from xla_train.models.lstm import SentimentLSTM

dev = torch_xla.device()
projected = []
real_projection = scan_rnn.projected_rows
scan_rnn.projected_rows = lambda *a: projected.append(tuple(a[0].shape)) or real_projection(*a)


class Net(nn.Module):
    def __init__(self, vocab, cell, between=None, batch_first=True):
        super().__init__()
        self.embedding = nn.Embedding(vocab, 6, padding_idx=0)
        with torch.no_grad():
            self.embedding.weight[0] = 0.3  # a padding row that is not zero: its tokens still feed W_ih's gradient
        self.rnn = cell(6, 5, batch_first=batch_first)
        self.between = between

    def forward(self, ids):
        x = self.embedding(ids)
        if self.between == "scaled in place":
            x.mul_(2.0)
        elif self.between == "dropout":
            x = nn.functional.dropout(x, 0.5, self.training)
        out, state = self.rnn(x)
        return out, *(state if isinstance(state, tuple) else (state,))


def run(net, ids, device):
    outs = net(ids.to(device))
    outs = outs if isinstance(outs, tuple) else (outs,)
    weights = [torch.randn(t.shape, generator=torch.Generator().manual_seed(i)) for i, t in enumerate(outs)]
    sum((t * w.to(device)).sum() for t, w in zip(outs, weights)).backward()
    torch_xla.sync()
    got = {f"output {i}": t.detach().cpu() for i, t in enumerate(outs)}
    return {**got, **{f"d {n}": p.grad.cpu() for n, p in net.named_parameters()}}


def compare(make, ids):
    torch.manual_seed(0)
    ref = make()
    twin = make()
    twin.load_state_dict(ref.state_dict())
    twin = twin.to(dev)
    scan_rnn.use_scan_rnn(twin, verbose=False, recurrence=torch_xla_recurrence)
    projected.clear()
    want, got = run(ref, ids, "cpu"), run(twin, ids, dev)
    hooks = len(twin.embedding._forward_hooks)
    scan_rnn.restore_rnn(twin)
    return {
        "projected": list(projected),
        "max error": max((want[k] - got[k]).abs().max().item() for k in want),
        "gradients": sorted(k for k in got if k.startswith("d ")),
        "hooks while swapped": hooks,
        "hooks after restore": len(twin.embedding._forward_hooks),
    }


ids = torch.randint(0, 20, (4, 9))
ids[:, :3] = 0  # padding in front, as the data modules pad


def bilstm(*a, **k):
    return rnn.LSTM(*a, **k, num_layers=2, bidirectional=True)


found = {
    "2-layer bidirectional LSTM": compare(lambda: Net(20, bilstm), ids),
    "GRU, time-major": compare(lambda: Net(20, rnn.GRU, batch_first=False), ids.t().contiguous()),
    "scaled in place": compare(lambda: Net(20, rnn.LSTM, "scaled in place"), ids),
    "more rows than tokens": compare(lambda: Net(40, rnn.LSTM), ids),
}
net = Net(20, rnn.LSTM, "dropout").to(dev).train()
scan_rnn.use_scan_rnn(net, verbose=False, recurrence=torch_xla_recurrence)
projected.clear()
net(ids.to(dev))
found["dropout between"] = list(projected)
found["SentimentLSTM"] = compare(lambda: SentimentLSTM(vocab_size=20, embed_dim=6, hidden_size=5), ids)
print(json.dumps(found))
