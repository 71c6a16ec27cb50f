"""Image data modules: uint8 NHWC arrays in memory, sent as uint8 and normalised on the device.

Streamed batches are augmented on the host; resident ones (data.on_device) on
the device, from its own random numbers. Both use preprocess/images.py's crop_flip.
"""

from __future__ import annotations

import numpy as np
import torch

from xla_train.data.base import DEFAULT_VAL_FRACTION, ArrayDataModule, OnDevice
from xla_train.errors import ConfigError
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


class ImageDataModule(ArrayDataModule):
    kind = "image"
    image_size = 32
    mean: tuple = (0.5, 0.5, 0.5)
    std: tuple = (0.25, 0.25, 0.25)

    def __init__(
        self,
        batch_size: int = 128,
        augment: bool = False,
        num_workers: int = 0,
        seed: int | None = None,
        val_fraction: float = DEFAULT_VAL_FRACTION,
        split_seed: int = 0,
        on_device: OnDevice = "auto",
    ):
        super().__init__(
            batch_size=batch_size,
            num_workers=num_workers,
            seed=seed,
            val_fraction=val_fraction,
            split_seed=split_seed,
            on_device=on_device,
        )
        self.augment = augment

    @property
    def labels(self) -> list[str]:
        raise NotImplementedError

    def check_net(self, net) -> None:
        outputs, classes = (getattr(net, "config", None) or {}).get("num_classes"), len(self.labels)
        if outputs is not None and outputs < classes and not (outputs == 1 and classes == 2):
            raise ConfigError(
                f"the net has {outputs} output class(es) but the data {classes} labels; "
                f"set model.net.num_classes={classes}"
            )

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
