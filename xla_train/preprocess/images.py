"""Raw inputs to net-ready tensors, shared by training and inference.

One function serves both sides so that a checkpoint predicts on exactly the
tensors it was trained on. Training runs the same torch functions on whatever
device holds the batch: images travel as uint8 (a quarter of float32's bytes)
and are normalised, and augmented, where the step runs. Only torch and numpy:
inference imports this.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def channel_stats(mean, std, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) as float32 (1, C, 1, 1) tensors on `device`, for normalise."""
    return tuple(torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1).to(device) for v in (mean, std))


def normalise(x: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 images (N, H, W, 3) on any device -> normalised float32 (N, 3, H, W) on that device. mean and std:
    per-channel sequences, or channel_stats' tensors already on x's device (no upload per call)."""
    if x.dtype != torch.uint8:
        raise TypeError(f"expected uint8 images, got {x.dtype}")
    if not isinstance(mean, torch.Tensor):
        mean, std = channel_stats(mean, std, x.device)
    return (x.permute(0, 3, 1, 2).float().div(255.0) - mean) / std


def images_to_tensor(images, mean, std) -> torch.Tensor:
    """uint8 images (N, H, W, 3), numpy or CPU tensor -> normalised float32 (N, 3, H, W) on the CPU."""
    return normalise(torch.as_tensor(np.ascontiguousarray(images)), mean, std)


def crop_flip(x: torch.Tensor, pad: int) -> torch.Tensor:
    """uint8 (N, H, W, C) on any device -> the same shape: a random crop of the zero-padded image, mirrored
    left-right with probability 1/2. Drawn from x's device's generator (torch.randint, torch.rand), so on XLA
    the step's device seed decides the crops and a resumed run draws the same ones."""
    n, h, w, _ = x.shape
    dy = torch.randint(0, 2 * pad + 1, (n,), device=x.device)
    dx = torch.randint(0, 2 * pad + 1, (n,), device=x.device)
    flip = torch.rand(n, device=x.device) < 0.5
    padded = F.pad(x, (0, 0, pad, pad, pad, pad))
    rows = dy[:, None] + torch.arange(h, device=x.device)  # (N, H)
    cols = dx[:, None] + torch.arange(w, device=x.device)  # (N, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    return padded[torch.arange(n, device=x.device)[:, None, None], rows[:, :, None], cols[:, None, :]]


def resize_images(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 (N, H, W, 3) of any H, W -> uint8 (N, size, size, 3), bilinear."""
    if images.shape[1:3] == (size, size):
        return images
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return x.round().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def luma(rgb: np.ndarray) -> np.ndarray:
    """uint8 (..., 3) RGB -> uint8 (..., 1) grey, bit for bit as PIL's convert("L") makes it (ITU-R 601-2 in its
    16-bit fixed point, rounded), so an RGB array reaches a grey net as the same picture decoded from a file does.
    A float 0.299/0.587/0.114 product rounds some pixels the other way."""
    r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)[..., None]


def decode_image(source, size: int, name: str, channels: int = 3) -> np.ndarray:
    """A PNG, JPEG, ... (a path, or a file object of its bytes, as the HTTP server has it) -> uint8 (size, size,
    channels), RGB or grey: one decoder for training folders, `predict` and the server, so the same file becomes the
    same pixels everywhere. Every failure is a UserError naming the file."""
    from PIL import Image, UnidentifiedImageError

    from xla_train.errors import UserError

    try:
        with Image.open(source) as im:
            pixels = np.asarray(im.convert("L" if channels == 1 else "RGB").resize((size, size), Image.BILINEAR))
            return pixels.astype(np.uint8, copy=False).reshape(size, size, channels)
    except PermissionError:
        raise UserError(
            f"{name} cannot be read: permission denied; make it readable (chmod +r) or copy it somewhere you can read"
        ) from None
    except Image.DecompressionBombError as e:  # PIL refuses to decode it: it would take gigabytes of memory
        raise UserError(
            f"{name} is too large to decode ({str(e).split(', could be')[0]}: PIL's "
            f"decompression-bomb limit); downscale it first (the model reads {size}x{size} images)"
        ) from None
    except (UnidentifiedImageError, OSError) as e:
        raise UserError(f"{name} is not a readable image ({type(e).__name__}); use PNG or JPEG files") from None
