"""The base of every image data module: uint8 NHWC arrays in memory, sent as uint8 and normalised on the device.

Streamed batches are augmented on the host; resident ones (data.on_device) on
the device, from its own random numbers. Both use preprocess/images.py's crop_flip.
"""

from __future__ import annotations

import numpy as np
import torch

from xla_train.data.base import BaseDataModule
from xla_train.preprocess.images import channel_stats, crop_flip, normalise

PAD = 4  # the crop's zero padding: CIFAR's 32x32 -> random 32x32 crops of 40x40


class ImageTransform:
    """The host's part: uint8 (N, H, W, 3) stays uint8; with augment, a padded random crop and a flip.

    The crop keeps the image size, so augmentation never changes a batch's shape.
    """

    def __init__(self, augment: bool = False, pad: int = PAD):
        self.augment, self.pad = augment, pad

    def __call__(self, images: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(np.ascontiguousarray(images))
        return crop_flip(x, self.pad) if self.augment else x


class ImagePrepare:
    """The device's part: uint8 (N, H, W, 3) -> normalised float (N, 3, H, W), cropped and flipped first with
    augment (resident batches). Not a module, so the run's checkpoint does not change; the channel statistics
    go to each device once, not with every step (on XLA an upload per traced step), and are not pickled."""

    def __init__(self, mean, std, pad: int = PAD):
        self.mean, self.std, self.pad = tuple(mean), tuple(std), pad
        self._stats: dict = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_stats": {}}

    def __call__(self, x: torch.Tensor, augment: bool = False) -> torch.Tensor:
        key = str(x.device)
        if key not in self._stats:
            self._stats[key] = channel_stats(self.mean, self.std, x.device)
        return normalise(crop_flip(x, self.pad) if augment else x, *self._stats[key])


def channel_mean_std(images: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of uint8 (N, H, W, C) images scaled to [0, 1], a chunk at a time."""
    c = images.shape[-1]
    total, squares, n = np.zeros(c), np.zeros(c), 0
    for i in range(0, len(images), 4096):
        chunk = images[i : i + 4096].reshape(-1, c).astype(np.float64) / 255.0
        total, squares, n = total + chunk.sum(0), squares + (chunk * chunk).sum(0), n + len(chunk)
    mean = total / max(n, 1)
    std = np.sqrt(np.maximum(squares / max(n, 1) - mean * mean, 0.0))
    return [round(float(m), 6) for m in mean], [round(float(max(s, 1e-3)), 6) for s in std]


class ImageDataModule(BaseDataModule):
    kind = "image"
    image_size = 32
    mean: tuple = (0.5, 0.5, 0.5)
    std: tuple = (0.25, 0.25, 0.25)

    def __init__(self, augment: bool = False, **settings):
        """augment: random crop and flip on training batches; settings: BaseDataModule's (batch_size, ...)."""
        super().__init__(**settings)
        self.augment = augment

    def transform(self, train: bool) -> ImageTransform:
        return ImageTransform(augment=self.augment and train)

    def preparer(self) -> ImagePrepare:
        return ImagePrepare(self.mean, self.std)

    def inference_info(self) -> dict:
        return {
            "kind": self.kind,
            "labels": list(self.labels),
            "image_size": self.image_size,
            "mean": list(self.mean),
            "std": list(self.std),
        }


class MeasuredImageDataModule(ImageDataModule):
    """A user's images: class names and channel statistics come from the data (set by load_arrays through
    `measured`), not from constants; a checkpoint's statistics, once adopted, win, so validation, test and a
    split's prediction see inputs as training did."""

    _names: list[str] | None = None
    _stats: tuple | None = None
    _adopted: tuple | None = None

    def measured(self, names: list[str], train_images: np.ndarray | None) -> None:
        self._names = list(names)
        self._stats = channel_mean_std(train_images) if train_images is not None else None

    def adopt(self, block: dict) -> None:
        if "mean" in block:
            self._adopted = (list(block["mean"]), list(block["std"]))

    @property
    def labels(self) -> list[str]:
        self.setup()
        return self._names

    @property
    def mean(self):
        self.setup()
        return (self._adopted or self._stats)[0]

    @property
    def std(self):
        self.setup()
        return (self._adopted or self._stats)[1]
