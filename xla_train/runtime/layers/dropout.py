"""nn.Dropout on XLA:CPU with its mask hashed from each element's position and one seed from the device's generator.

torch_xla draws a dropout mask as one uniform float per element from XLA's random-bit generator, which XLA:CPU
expands into Philox rounds of 64-bit multiplies, a visible share of a small net's step (docs/results.md,
"Dropout on XLA:CPU"). Here each call draws one 31-bit seed from the same generator (so a step's
seed decides its masks, and a resumed run draws the same ones), and each element's 24 bits come from murmur3's
32-bit finaliser of its index and that seed: a few integer ops an element. An element is kept where its bits fall
under round((1 - p) x 2^24), as uniform floats with 24 bits would keep it, and kept values are scaled by 1 / (1 - p)
as torch's are. The masks are as likely as torch's but not the same draws. A TPU's generator is native: nothing is
swapped there. Teardown gives the layers their class back."""

from __future__ import annotations

import torch
from torch import nn

from xla_train import compat

BITS = 24
_MIX = (0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35)  # the golden-ratio step, then murmur3's fmix32 multipliers


def _s32(v: int) -> int:
    """A uint32 constant as the int32 with its bits: XLA's int32 multiply wraps, as uint32 arithmetic does."""
    return v - (1 << 32) if v >= 1 << 31 else v


def _shr(h: torch.Tensor, n: int) -> torch.Tensor:
    """A logical right shift of int32 bits (torch's >> on int32 keeps the sign)."""
    return (h >> n) & ((1 << (32 - n)) - 1)


_POSITIONS: dict = {}  # (shape, device) -> each element's index times the golden-ratio step, as device data
# torch device type -> how a host tensor becomes device data there, for a runtime that traces a step anew at every
# step (torch_xla's, handed in by runtime/layers/rewrites.py); elsewhere the positions are an iota in the program
DEVICE_DATA: dict = {}


def _positions(shape: tuple, n: int, device) -> torch.Tensor:
    """Each element's index times the first mixing constant. On torch_xla it is device data made once: a step traced
    anew (Lightning's own, one step at a time) otherwise built the (n,) index tensor on the host at every step,
    most of that step's host time (docs/results.md, "Lightning's overhead"). Elsewhere (JAX) an iota in the program."""
    to_device = DEVICE_DATA.get(torch.device(device).type)
    if to_device is None:
        return torch.arange(n, dtype=torch.int32, device=device).view(shape) * _s32(_MIX[0])
    key = (shape, str(device))
    if key not in _POSITIONS:
        host = torch.arange(n, dtype=torch.int32).view(shape) * _s32(_MIX[0])
        _POSITIONS[key] = to_device(host, device)
    return _POSITIONS[key]


def keep_mask(shape, p: float, seed: torch.Tensor) -> torch.Tensor:
    """Which elements of a `shape` tensor dropout keeps, for `seed` (int32, one element, on the device)."""
    n = 1
    for d in shape:
        n *= d
    h = _positions(tuple(shape), n, seed.device) + seed
    h = h ^ _shr(h, 16)
    h = h * _s32(_MIX[1])
    h = h ^ _shr(h, 13)
    h = h * _s32(_MIX[2])
    h = h ^ _shr(h, 16)
    return _shr(h, 32 - BITS) < round((1 - p) * (1 << BITS))


def _forward(self, x: torch.Tensor) -> torch.Tensor:
    if not self.training or self.p == 0 or x.device.type == "cpu":  # swapped in on XLA alone
        return nn.Dropout.forward(self, x)
    if self.p == 1:
        return x.mul_(0) if self.inplace else x * 0
    seed = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int32, device=x.device)
    keep = keep_mask(x.shape, self.p, seed)
    out = torch.where(keep, x * (1.0 / (1.0 - self.p)), torch.zeros((), dtype=x.dtype, device=x.device))
    return x.copy_(out) if self.inplace else out  # one product a kept element: no order for XLA to change


def use_hashed_dropout(module: nn.Module) -> dict[nn.Module, type]:
    """Every nn.Dropout of `module` draws its mask as above; returns {layer: its class} to undo it. A subclass with a
    forward of its own keeps it, and its `super().forward()` runs this one."""
    return compat.swap_forward(module, (nn.Dropout,), _forward)
