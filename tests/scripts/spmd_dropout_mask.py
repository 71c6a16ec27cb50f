"""Run by tests/test_spmd.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import sys
import numpy as np
import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

devices = int(sys.argv[1])
if devices > 1:
    xr.use_spmd()
from xla_train.runtime.torch_xla.spmd import batch_sharding, data_mesh

x = torch.ones(64, 512)
xm.set_rng_state(123)
if devices > 1:
    x = xm.send_cpu_data_to_device([x], xm.xla_device(), batch_sharding(data_mesh(devices)))[0]
else:
    x = x.to(xm.xla_device())
masks = [(torch.nn.functional.dropout(x, 0.5, training=True) != 0).cpu().numpy() for _ in range(2)]
np.save(sys.argv[2], np.stack(masks))
