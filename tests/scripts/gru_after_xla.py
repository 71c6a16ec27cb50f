"""Run by tests/test_compat.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import torch
import torch_xla  # noqa: F401  (its import puts its own scan GRU in torch.nn.GRU's place)
from torch import nn
from xla_train import compat

x = torch.randn(2, 5, 3)


def runs_on_the_cpu():
    try:
        nn.GRU(3, 4, batch_first=True)(x)
        return True
    except RuntimeError:  # "Expected all tensors in the given list to be XLA tensors"
        return False


before = runs_on_the_cpu()
compat.keep_torch_gru()
compat.keep_torch_gru()
kept = runs_on_the_cpu() and nn.GRU is torch.nn.modules.rnn.GRU
compat.unkeep_torch_gru()
print(before, kept, runs_on_the_cpu())
