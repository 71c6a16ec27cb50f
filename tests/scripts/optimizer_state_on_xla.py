"""Run by tests/test_optimizer_state.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch import nn
from xla_train.runtime.torch_xla.optimizer_state import prime_optimizer_state


def train(prime, width, amsgrad):
    device = torch_xla.device()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, 2)).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, foreach=True, amsgrad=amsgrad)
    sent = prime_optimizer_state(opt, lambda ts: xm.send_cpu_data_to_device(ts, device)) if prime else 0
    x = torch.randn(4, 6).to(device)
    torch_xla.sync()
    before = met.metric_data("CompileTime")[0] if met.metric_data("CompileTime") else 0
    for _ in range(3):
        opt.zero_grad()
        net(x).square().mean().backward()
        opt.step()
        torch_xla.sync()
    return met.metric_data("CompileTime")[0] - before, sent, [p.cpu() for p in net.parameters()]


out = {}
for amsgrad in (False, True):
    width = 9 + 2 * amsgrad  # each case's graphs its own, not cached by another
    plain_compiles, _, plain = train(False, width, amsgrad)
    primed_compiles, sent, _ = train(True, width + 1, amsgrad)
    _, _, primed = train(True, width, amsgrad)
    same = all(torch.equal(a, b) for a, b in zip(plain, primed))
    out[str(amsgrad)] = {"plain": plain_compiles, "primed": primed_compiles, "sent": sent, "same": same}
print(json.dumps(out))
