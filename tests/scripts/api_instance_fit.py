"""Run by tests/test_own_model.py in a fresh process (XLA's device count and mode are fixed for a process's life), on
the runtime its argument names."""

import json
import sys

import numpy as np
import torch
import xla_train
from user_nets import FlatNet

rng = np.random.default_rng(0)
x = rng.normal(size=(240, 2, 4, 4)).astype(np.float32)
y = (x[:, 0].mean((1, 2)) > 0).astype(np.int64) + 2 * (x[:, 1].mean((1, 2)) > 0)
torch.manual_seed(0)
net = FlatNet()
run = xla_train.fit(
    net=net,
    x=x[:200],
    y=y[:200],
    test_data=(x[200:], y[200:]),
    runtime=sys.argv[1],
    accelerator="xla",
    epochs=2,
    batch_size=16,
    lr=0.01,
)
with torch.no_grad():
    direct = torch.softmax(net.eval()(torch.from_numpy(x[200:])), 1)
predicted = xla_train.load_for_inference(run.checkpoint, net=FlatNet).probabilities(x[200:])
print(
    json.dumps(
        {
            "diff": float((direct - predicted).abs().max()),
            "test": run.test_metrics,
            "device": str(next(net.parameters()).device),
        }
    )
)
