"""Run by tests/test_pods.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import torch
import torch_xla
import torch_xla.distributed.spmd as xs
from xla_train.runtime.torch_xla.spmd import data_mesh, enable_spmd, require_replicated
from xla_train.errors import HardwareError

enable_spmd()
mesh, device = data_mesh(4), torch_xla.device()
whole, marked, split = (torch.arange(8.0).to(device) for _ in range(3))
xs.mark_sharding(marked, mesh, (None,))
xs.mark_sharding(split, mesh, (0,))
require_replicated({"state_dict": {"w": whole, "r": marked}, "optimizer": [{"m": whole}]})
try:
    require_replicated({"state_dict": {"w": whole, "s": split}})
except HardwareError as e:
    print(e)
print(torch.equal(marked.cpu(), torch.arange(8.0)))  # what each host's .cpu() reads of a replicated tensor
