"""nn.Linear on XLA with its weight gradient computed in the weight's own shape.

Stock autograd picks a linear layer's weight gradient's form from the transposed weight's strides: on the CPU
they say column-major, so it computes `grad.T @ x`; an XLA tensor reports contiguous strides for that view, so
XLA gets `(x.T @ grad).T`. Where the gradient is a graph output (one step per execution), XLA:CPU reads that
transpose column by column in each optimizer fusion that uses it: a tenth of the quickstart's step
(docs/results.md, "A linear layer's gradient"). `grad.T @ x` gives the [out, in] gradient directly, the same
sums. While a model trains on XLA every nn.Linear's forward (or a subclass's super().forward()) runs this one;
teardown gives the layers their class back, so the model handed back is plain torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xla_train import compat


class _Linear(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="xla")
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    @torch.amp.custom_bwd(device_type="xla")
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        want_x, want_w, want_b = ctx.needs_input_grad
        grad_x = grad @ weight if want_x else None
        rows = grad.reshape(-1, grad.shape[-1])
        grad_w = rows.t() @ x.reshape(-1, x.shape[-1]) if want_w else None
        grad_b = rows.sum(0) if want_b and ctx.has_bias else None
        return grad_x, grad_w, grad_b


def _forward(self, x: torch.Tensor) -> torch.Tensor:
    if x.device.type != "xla" or not torch.is_grad_enabled():
        return F.linear(x, self.weight, self.bias)
    return _Linear.apply(x, self.weight, self.bias)


def use_xla_linear(module: nn.Module) -> dict[nn.Module, type]:
    """Every nn.Linear layer of `module` runs _Linear; returns {layer: its class} to undo it. A subclass with a
    forward of its own keeps it, and its `super().forward()` runs _Linear."""
    return compat.swap_forward(module, (nn.Linear,), _forward)


def restore_linear(changed: dict[nn.Module, type]) -> None:
    compat.restore_classes(changed)
