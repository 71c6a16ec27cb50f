"""Run by tests/test_scan_rnn.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import glob
import json
import os
import re
import torch
import torch_xla
from torch.nn.modules import rnn
from xla_train.runtime.torch_xla.recurrence import torch_xla_recurrence
from xla_train.runtime.layers.scan_rnn import ScanRNN

dev, (t, n, h) = torch_xla.device(), (50, 8, 16)
found = {}
for name, gates in (("LSTM", 4), ("GRU", 3)):
    net = ScanRNN(getattr(rnn, name)(8, h), torch_xla_recurrence).to(dev)
    out, state = net(torch.randn(t, n, 8).to(dev))
    (state[0] if name == "LSTM" else state).sum().backward()
    torch_xla.sync()
    hlo = open(sorted(glob.glob(os.environ["DUMP"] + "/*after_optimizations.txt"))[-1]).read()
    found[name] = {
        "gate gradients transposed": len(re.findall(rf" = f32\[{gates * h},{t},{n}\]", hlo)),
        "reduces": len(re.findall(r" reduce(-window)?\(", hlo)),
        "dots": len(re.findall(r" dot\(", hlo)),
        "outputs' zeros": len(re.findall(rf" = f32\[{t},{n},{h}\]\S* broadcast\(", hlo)),
        "gates' gradients' zeros": len(
            re.findall(rf" = f32\[{t},{n},{gates * h}\]\S* broadcast\(\S+, dimensions={{}}", hlo)
        ),
    }
print(json.dumps(found))
