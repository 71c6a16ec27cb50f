"""nn.MaxPool2d on XLA:CPU as a reduction over window axes, with a backward of compares and selects.

torch_xla lowers max pooling's gradient to a select-and-scatter, which XLA:CPU has no kernel for: it expands it
into iotas of the pooled input's size, a reduction that carries indices, and a scatter, all compiled into every
step of a K-step program (docs/results.md, "Max pooling on XLA:CPU"). Where the windows tile the input (kernel ==
stride, no padding or dilation), pooling is a reshape and a max over the window's two axes, and its gradient goes
to the first maximum of each window in row-major order, as torch's own kernel sends it: compares and selects, a
shorter compile and a smaller peak for the same step time. The same values and gradients (only a window holding a
NaN differs: torch sends its gradient to the NaN, this to no element); only the graph differs. Teardown gives
the layers their class back."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xla_train import compat


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def tiles(layer: nn.MaxPool2d) -> int | None:
    """The window size where `layer`'s windows tile its input (and so run as a reduction here); else None."""
    k, s = _pair(layer.kernel_size), _pair(layer.stride if layer.stride is not None else layer.kernel_size)
    if layer.return_indices or layer.ceil_mode or _pair(layer.padding) != (0, 0) or _pair(layer.dilation) != (1, 1):
        return None
    return k[0] if k[0] == k[1] == s[0] == s[1] else None


def _windows(x: torch.Tensor, k: int) -> torch.Tensor:
    """[..., H, W] cut to whole windows, as [..., H/k, k, W/k, k]."""
    h, w = x.shape[-2] // k, x.shape[-1] // k
    return x[..., : h * k, : w * k].reshape(*x.shape[:-2], h, k, w, k)


class _TiledMaxPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k: int):
        win = _windows(x, k)
        out = win.amax(dim=(-3, -1))
        ctx.save_for_backward(x, out)
        ctx.k = k
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        k = ctx.k
        win = _windows(x, k)
        hit = win == out[..., :, None, :, None]
        # the first hit of each window in row-major order, as torch's kernel picks it: k*k slices, elementwise
        taken = torch.zeros_like(hit[..., :, 0, :, 0])
        rows = []
        for i in range(k):
            row = []
            for j in range(k):
                at = hit[..., :, i, :, j]
                row.append(at & ~taken)
                taken = taken | at
            rows.append(torch.stack(row, dim=-1))
        first = torch.stack(rows, dim=-3)
        g = torch.where(first, grad[..., :, None, :, None], torch.zeros((), dtype=grad.dtype, device=grad.device))
        g = g.reshape(*x.shape[:-2], out.shape[-2] * k, out.shape[-1] * k)
        cut_h, cut_w = x.shape[-2] - g.shape[-2], x.shape[-1] - g.shape[-1]
        if cut_h or cut_w:  # rows and columns no window covers get no gradient
            g = F.pad(g, (0, cut_w, 0, cut_h))
        return g, None


def _forward(self, x: torch.Tensor) -> torch.Tensor:
    k = tiles(self)
    if x.device.type == "cpu" or k is None or x.dim() not in (3, 4):  # swapped in on XLA alone
        return nn.MaxPool2d.forward(self, x)
    return _TiledMaxPool.apply(x, k)


def use_tiled_max_pool(module: nn.Module) -> dict[nn.Module, type]:
    """Every nn.MaxPool2d of `module` whose windows tile its input runs _TiledMaxPool; returns {layer: its class}
    to undo it. A subclass with a forward of its own keeps it, and its `super().forward()` runs _TiledMaxPool."""
    changed: dict[nn.Module, type] = {}
    for layer in module.modules():
        if isinstance(layer, nn.MaxPool2d) and tiles(layer):
            changed.update(compat.swap_forward(layer, (nn.MaxPool2d,), _forward))
    return changed
