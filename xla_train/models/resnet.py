"""The CIFAR ResNet of He et al. 2015 (section 4.2): ResNet-20/32/44/56/110, as a plain nn.Module.

Depth is 6n+2: a 3x3 stem, three stages of n basic blocks at 16, 32 and 64 channels on 32x32, 16x16 and 8x8 maps,
global average pooling and one linear layer. Shortcuts are the paper's option A by default (identity, and where a
stage halves the map and doubles the channels a stride-2 subsample padded with zero channels: no parameters);
option B (1x1 convolution and BatchNorm on those shortcuts) is there for comparison. Static shapes; like the CNN,
no Lightning or torch_xla.
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import nn

from xla_train.errors import ConfigError, require_positive

SHORTCUTS = ("A", "B")


def blocks_per_stage(depth) -> int:
    """n in depth = 6n+2; anything else is a ConfigError."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ConfigError(
            f"depth={depth!r} is not a CIFAR ResNet depth; it must be 6n+2 with n >= 1 "
            f"(3 stages of n two-conv blocks, plus stem and classifier), e.g. 20, 32, 44, 56 or 110"
        )
    return (depth - 2) // 6


def conv3x3(c_in: int, c_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)


class PadShortcut(nn.Module):
    """Option A: keep every `stride`-th pixel and append zero channels (as fb.resnet.torch does)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.extra, self.stride = c_out - c_in, stride

    def forward(self, x):
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra))


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, shortcut: str):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(c_in, c_out, stride), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = conv3x3(c_out, c_out), nn.BatchNorm2d(c_out)
        if stride == 1 and c_in == c_out:
            self.shortcut = nn.Identity()
        elif shortcut == "A":
            self.shortcut = PadShortcut(c_in, c_out, stride)
        else:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    arch = "resnet"

    def __init__(self, depth: int = 20, num_classes: int = 10, shortcut: Literal["A", "B"] = "A"):
        super().__init__()
        require_positive("model.net.", num_classes=num_classes)
        n = blocks_per_stage(depth)
        if shortcut not in SHORTCUTS:
            raise ConfigError(
                f"shortcut={shortcut!r} is not known; use A (zero-padded identity, "
                f"the paper's CIFAR choice) or B (1x1 convolution)"
            )
        self.stem = nn.Sequential(conv3x3(3, 16), nn.BatchNorm2d(16), nn.ReLU())
        blocks, c_in = [], 16
        for stage, c_out in enumerate((16, 32, 64)):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(BasicBlock(c_in, c_out, stride, shortcut))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):  # He et al. 2015b, as the paper initialises
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(x.mean(dim=(2, 3)))
