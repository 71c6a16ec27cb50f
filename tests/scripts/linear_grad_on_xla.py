"""Run by tests/test_linear_grad.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import torch
import torch_xla
from torch import nn
from xla_train.runtime.layers.linear_grad import restore_linear, use_xla_linear

dev = torch_xla.device()
torch.manual_seed(0)
found = {"grads": {}}


def grads(layer, x, on):
    layer = layer.to(on)
    x = x.detach().clone().to(on).requires_grad_()
    (layer(x) * torch.linspace(-1, 1, layer.out_features, device=on)).sum().backward()
    out = {"x": x.grad, "weight": layer.weight.grad}
    if layer.bias is not None:
        out["bias"] = layer.bias.grad
    return {k: v.cpu() for k, v in out.items()}


for name, shape, bias in [("2-D", (8, 5), True), ("3-D", (2, 3, 5), True), ("no bias", (8, 5), False)]:
    stock = nn.Linear(5, 4, bias=bias)
    x = torch.randn(*shape)
    reference = grads(stock, x, "cpu")
    swapped = nn.Linear(5, 4, bias=bias)
    swapped.load_state_dict(stock.state_dict())
    changed = use_xla_linear(swapped)
    got = grads(swapped, x, dev)
    found["grads"][name] = {
        "swapped": type(swapped).__name__ == "Linear" and type(swapped) is not nn.Linear and len(changed) == 1,
        "diff": {k: (got[k] - reference[k]).abs().max().item() for k in reference},
        "shapes": {k: [list(got[k].shape), list(reference[k].shape)] for k in reference},
    }
    restore_linear(changed)
    found["grads"][name]["restored"] = type(swapped) is nn.Linear


class Scaled(nn.Linear):
    def forward(self, x):
        return 2 * super().forward(x)


class Plain(nn.Linear):
    pass


# The weight gradient's graph: a transpose of an [in, out] product (stock), or the [out, in] product itself.
# (Transposes of a product's operands fold into its contracting dimensions; of its result, they do not.)
def transposed_products(swap, cls=nn.Linear):
    layer = cls(64, 32)
    if swap:
        use_xla_linear(layer)
    layer = layer.to(dev)
    x = torch.randn(16, 64).to(dev)
    layer(x).square().sum().backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([layer.weight.grad])
    return sum(" transpose(" in line and " %dot" in line for line in hlo.splitlines())


found["transposes"] = {"stock": transposed_products(False), "swapped": transposed_products(True)}
found["transposes"]["own forward"] = transposed_products(True, Scaled)

# bf16 autocast, as precision=bf16-mixed runs on XLA: float32 gradients, close to stock autocast's.
auto = {}
for swap in (False, True):
    torch.manual_seed(1)
    layer = nn.Linear(16, 8)
    if swap:
        use_xla_linear(layer)
    layer = layer.to(dev)
    x = torch.randn(4, 16).to(dev)
    with torch.autocast("xla", dtype=torch.bfloat16):
        y = layer(x)
    y.float().sum().backward()
    auto[swap] = (y.dtype, layer.weight.grad.cpu(), layer.bias.grad.cpu())
found["autocast"] = {
    "dtypes": [str(auto[True][0]), str(auto[True][1].dtype)],
    "diff": max((auto[True][i] - auto[False][i]).abs().max().item() for i in (1, 2)),
}


# A subclass with a forward of its own keeps it, its super().forward() swapped; one without gets the swap; state
# dict keys stay.
net = nn.Sequential(Scaled(3, 3), Plain(3, 3), nn.ReLU(), nn.Linear(3, 2))
keys = list(net.state_dict())
x = torch.randn(4, 3)
stock_scaled = net[0](x)
changed = use_xla_linear(net)
found["which"] = {
    "swapped": sorted(cls.__name__ for cls in changed.values()),
    "scaled kept": isinstance(net[0], Scaled)
    and (net[0].to(dev)(x.to(dev)).cpu() - stock_scaled).abs().max().item() < 1e-5,
    "keys": list(net.state_dict()) == keys,
    "isinstance": isinstance(net[1], Plain),
}
restore_linear(changed)
net[0].to("cpu")
found["which"]["restored"] = [type(m).__name__ for m in net] == ["Scaled", "Plain", "ReLU", "Linear"]
print(json.dumps(found))
