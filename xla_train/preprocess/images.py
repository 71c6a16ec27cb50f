"""Raw inputs to net-ready tensors, shared by training and inference.

One function serves both sides so that a checkpoint predicts on exactly the
tensors it was trained on. Only torch and numpy: inference imports this.
"""
from __future__ import annotations

import numpy as np
import torch

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def images_to_tensor(images, mean, std) -> torch.Tensor:
    """uint8 images (N, H, W, 3) -> normalised float32 (N, 3, H, W)."""
    x = torch.as_tensor(np.ascontiguousarray(images))
    if x.dtype != torch.uint8:
        raise TypeError(f"expected uint8 images, got {x.dtype}")
    x = x.permute(0, 3, 1, 2).float().div_(255.0)
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (x - m) / s


def resize_images(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 (N, H, W, 3) of any H, W -> uint8 (N, size, size, 3), bilinear."""
    if images.shape[1:3] == (size, size):
        return images
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return x.round().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
