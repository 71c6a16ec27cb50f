"""runtime/layers/dropout.py: dropout on XLA:CPU keeps each element with probability 1 - p, independently, scaled as torch
scales it, decided by the step's seed, with one random number drawn per call instead of one per element."""

from __future__ import annotations

import math

import pytest

from helpers import cli_env, path_with_tests, script_json

SCRIPT = r"""
import json
import re
import torch, torch_xla
from torch import nn
from xla_train.runtime.layers.dropout import use_hashed_dropout
from probes import swaps_in_fit

dev = torch_xla.device()
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
"""


@pytest.fixture(scope="module")
def found():
    return script_json(SCRIPT, env=cli_env(1, PYTHONPATH=path_with_tests()))


def test_one_random_number_a_call_instead_of_one_an_element(found):
    assert found["stock rng"] == ["u32[1048576]"], found["stock rng"]  # what the swap is for
    assert found["hashed rng"] == ["u64[1]"], found["hashed rng"]


def test_the_mask_puts_no_index_table_into_the_graph(found):
    """The elements' positions are device data made once, not an (n,) literal that a step traced anew (Lightning's
    own, one at a time) built and hashed on the host every time: most of that step's host time."""
    assert found["big constants"] == [], found["big constants"]


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
def test_each_element_is_kept_with_one_minus_p_independently_and_scaled_as_torch_scales(found, p):
    seen, q, n = found[str(p)], 1 - p, 1 << 20
    sigma = lambda prob: math.sqrt(prob * (1 - prob) / n)  # noqa: E731
    assert abs(seen["kept"] - q) < 6 * sigma(q), seen
    for pair in ("neighbours", "calls", "steps"):  # two draws both kept: q^2 if they are independent
        assert abs(seen[pair] - q * q) < 6 * sigma(q * q), (pair, seen)
    assert seen["values"] == [0.0, round(1 / q, 6)], seen
    assert seen["same seed"] and seen["differs"] == [True, True], seen


def test_gradient_eval_edges_inplace_and_a_subclass(found):
    assert found["grad"] and found["eval"] and found["p=1"] and found["p=0"] and found["inplace"]
    assert found["own forward"]


def test_the_strategy_swaps_only_nn_dropout_on_xla_cpu_and_restores_it(found):
    assert found["in fit"] == [True, True, False]  # Linear's gradient swap, Dropout's; Dropout2d is left alone
    assert found["after fit"] == ["Linear", "Dropout", "Dropout2d"]
