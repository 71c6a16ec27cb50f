"""Run by tests/test_checkpoint.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import sys
import torch
import torch_xla
import torch_xla.debug.metrics as met
from xla_train.models import CifarCNN
from xla_train.runtime.torch_xla.strategy import XLASingleDeviceStrategy

device = torch_xla.device()
net = CifarCNN().to(device)
opt = torch.optim.Adam(net.parameters(), foreach=True)
for _ in range(2):
    opt.zero_grad()
    net(torch.randn(4, 3, 32, 32).to(device)).sum().backward()
    opt.step()
    torch_xla.sync()
state = {"state_dict": net.state_dict(), "optimizer_states": [opt.state_dict()], "epoch": 3}
expected = {k: v.cpu() for k, v in net.state_dict().items()}


def transfers():
    return (met.metric_data("TransferFromDeviceTime") or [0])[0]


before = transfers()
XLASingleDeviceStrategy.default_checkpoint_io(None).save_checkpoint(state, sys.argv[1])
after = transfers()
saved = XLASingleDeviceStrategy.default_checkpoint_io(None).load_checkpoint(sys.argv[1])
moments = [s["exp_avg"] for s in saved["optimizer_states"][0]["state"].values()]
print(
    json.dumps(
        {
            "transfers": after - before,
            "same": all(torch.equal(saved["state_dict"][k], v) for k, v in expected.items()),
            "cpu": all(t.device.type == "cpu" for t in list(saved["state_dict"].values()) + moments),
            "moments": len(moments),
            "epoch": saved["epoch"],
        }
    )
)
