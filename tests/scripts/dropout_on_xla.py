"""Run by tests/test_dropout.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import re
import torch
import torch_xla
from torch import nn
from xla_train.runtime.layers import dropout
from xla_train.runtime.layers.dropout import use_hashed_dropout
from xla_train.runtime.torch_xla.backend import XLA
from probes import swaps_in_fit

dev = torch_xla.device()
dropout.DEVICE_DATA["xla"] = XLA.to_device  # as torch_xla's engine hands it to the rewrites
found = {}
n = 1 << 20


def rng_outputs(layer, x):
    # the random bits each rng-bit-generator of the graph makes, as "u32[n]" (its output besides the new state)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([layer(x)])
    return re.findall(r"= \(u64\[2\]\{0\}, (\w+\[\d+\])\{0\}\) rng-bit-generator\(", hlo)


stock = nn.Dropout(0.25)
ones = torch.ones(n, device=dev)
found["stock rng"] = rng_outputs(stock, ones)
changed = use_hashed_dropout(stock)
found["hashed rng"] = rng_outputs(stock, ones)
# constants of the graph with many elements: torch_xla lowers an arange to a literal built on the host at each trace
hlo = torch_xla._XLAC._get_xla_tensors_hlo([stock(ones)])
found["big constants"] = re.findall(r"(\w+\[\d{4,}\])\{0\} constant\(", hlo)

for p in (0.1, 0.25, 0.5, 0.9):
    layer = nn.Dropout(p)
    use_hashed_dropout(layer)
    torch_xla.manual_seed(7)
    a = layer(ones)
    b = layer(ones)  # the same step, another call
    torch_xla.sync()
    c = layer(ones)  # the next step
    torch_xla.manual_seed(7)
    again = layer(ones)
    a, b, c, again = (t.cpu() for t in (a, b, c, again))
    ka, kb, kc = a != 0, b != 0, c != 0
    found[str(p)] = {
        "kept": ka.float().mean().item(),
        "values": sorted({round(v, 6) for v in a.unique().tolist()}),
        "neighbours": (ka[:-1] & ka[1:]).float().mean().item(),
        "calls": (ka & kb).float().mean().item(),
        "steps": (ka & kc).float().mean().item(),
        "same seed": torch.equal(a, again),
        "differs": [not torch.equal(a, b), not torch.equal(a, c)],
    }

layer = nn.Dropout(0.5)
use_hashed_dropout(layer)
x = torch.randn(64, 33, device=dev, requires_grad=True)
y = layer(x)
y.backward(torch.ones_like(y))
xc, yc, gc = x.detach().cpu(), y.detach().cpu(), x.grad.cpu()
found["grad"] = torch.equal(gc, (yc != 0).float() * 2.0) and torch.allclose(yc, xc * gc)
layer.eval()
found["eval"] = torch.equal(layer(x).detach().cpu(), xc)
edge = nn.Dropout(1.0)
use_hashed_dropout(edge)
found["p=1"] = edge(ones[:10]).cpu().tolist() == [0.0] * 10
zero = nn.Dropout(0.0)
use_hashed_dropout(zero)
found["p=0"] = torch.equal(zero(ones[:10]).cpu(), torch.ones(10))
inplace = nn.Dropout(0.5, inplace=True)
use_hashed_dropout(inplace)
z = torch.ones(1000, device=dev)
out = inplace(z)
found["inplace"] = out is z and set(z.cpu().unique().tolist()) == {0.0, 2.0}


class Scaled(nn.Dropout):
    def forward(self, x):
        return 3 * super().forward(x)


own = Scaled(0.5)
use_hashed_dropout(own)
found["own forward"] = set(own(ones[:1000]).cpu().unique().tolist()) == {0.0, 6.0}


net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Dropout2d(0.5))
found["in fit"], found["after fit"] = swaps_in_fit(net, dev)
print(json.dumps(found))
