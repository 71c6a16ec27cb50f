"""bf16 on XLA the way torch_xla recommends it now: autocast on the XLA device.

Lightning's `bf16-true` on XLA sets the deprecated XLA_USE_BF16 variable, which
silently stores every float tensor as bf16, checkpoints included. Autocast
instead runs matmuls and convolutions in bf16 and keeps the weights, the
optimizer state and so the checkpoints in float32, which CPU inference expects.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from lightning.pytorch.plugins.precision.xla import XLAPrecision
from typing_extensions import override

BF16_NAMES = ("bf16", "bf16-mixed")


class XLABf16Autocast(XLAPrecision):
    def __init__(self) -> None:
        super().__init__("32-true")  # float32 storage; nothing is set in the environment
        self.precision = "bf16-mixed"

    @override
    @contextmanager
    def forward_context(self):  # Lightning's train/val/test/predict step contexts all enter this one
        with torch.autocast("xla", dtype=torch.bfloat16):
            yield
