"""Run by tests/test_max_pool.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import torch
import torch_xla
from torch import nn
from xla_train import compat
from xla_train.runtime.layers.max_pool import use_tiled_max_pool
from probes import swaps_in_fit

dev = torch_xla.device()
torch.manual_seed(0)
found = {"exact": {}}


def run(layer, x, on):
    x = x.detach().clone().to(on).requires_grad_()
    y = layer(x)
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(on)).sum().backward()  # the same weights on both
    return y.detach().cpu(), x.grad.cpu()


# Ties (small integers: many equal maxima in a window) must send the gradient where torch's kernel sends it, to
# the first maximum in row-major order; rows and columns no window covers (9 rows, k=2) get none.
cases = [
    ("random", (2, 3, 8, 8), 2, False),
    ("ties, cropped", (2, 3, 9, 7), 2, True),
    ("k=3, ties", (1, 2, 9, 9), 3, True),
    ("3-D input", (3, 6, 6), 2, True),
    ("all equal", (1, 1, 4, 4), 2, "zeros"),
]
for name, shape, k, ties in cases:
    x = torch.zeros(shape) if ties == "zeros" else torch.randint(0, 3, shape).float() if ties else torch.randn(shape)
    stock_y, stock_g = run(nn.MaxPool2d(k), x, "cpu")
    layer = nn.MaxPool2d(k)
    changed = use_tiled_max_pool(layer)
    y, g = run(layer, x, dev)
    found["exact"][name] = {
        "swapped": len(changed) == 1 and type(layer) is not nn.MaxPool2d,
        "values": torch.equal(y, stock_y),
        "grads": torch.equal(g, stock_g),
    }
    compat.restore_classes(changed)


def pool_ops(swap):
    layer = nn.MaxPool2d(2)
    if swap:
        use_tiled_max_pool(layer)
    x = torch.randn(2, 4, 8, 8).to(dev).requires_grad_()
    layer(x).square().sum().backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([x.grad])
    return {op: hlo.count(op) for op in ("select-and-scatter(", "reduce-window(", "scatter(")}


found["ops"] = {"stock": pool_ops(False), "swapped": pool_ops(True)}


class OwnForward(nn.MaxPool2d):
    def forward(self, x):
        return -super().forward(-x)


class Plain(nn.MaxPool2d):
    pass


net = nn.Sequential(
    nn.MaxPool2d(2),
    nn.MaxPool2d((3, 3), stride=3),
    Plain(2),
    OwnForward(2),
    nn.MaxPool2d(3, stride=2),
    nn.MaxPool2d(2, padding=1),
    nn.MaxPool2d(2, ceil_mode=True),
    nn.MaxPool2d(2, dilation=2),
    nn.MaxPool2d(2, return_indices=True),
)
x = torch.randint(0, 3, (2, 3, 8, 8)).float()  # ties
stock_own = run(net[3], x, "cpu")
changed = use_tiled_max_pool(net)
found["which"] = [i for i, m in enumerate(net) if m in changed]
own = run(net[3], x, dev)  # its own forward, whose super().forward() is the tiled pool: min pooling
found["own forward"] = [torch.equal(a, b) for a, b in zip(own, stock_own)] + [own[0].min().item() == 0.0]
compat.restore_classes(changed)
found["restored"] = [type(m).__name__ for m in net[:4]] == ["MaxPool2d", "MaxPool2d", "Plain", "OwnForward"]


# The strategy's own path: swapped while the model is on XLA:CPU, its classes back at teardown.
net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 2))
found["in fit"], found["after fit"] = swaps_in_fit(net, dev)
print(json.dumps(found))
