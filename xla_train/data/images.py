"""Image data modules: uint8 NHWC arrays in memory, normalised (and augmented) per batch on the host."""
from __future__ import annotations

import numpy as np
import torch

from xla_train.data.base import DEFAULT_VAL_FRACTION, ArrayDataModule
from xla_train.errors import ConfigError
from xla_train.preprocess.images import images_to_tensor


class ImageTransform:
    """uint8 (N, H, W, 3) -> float (N, 3, H, W); with augment, a padded random crop and a flip.

    The crop keeps the image size, so augmentation never changes a batch's shape.
    """

    def __init__(self, mean, std, augment: bool = False, pad: int = 4):
        self.mean, self.std, self.augment, self.pad = tuple(mean), tuple(std), augment, pad

    def __call__(self, images: np.ndarray) -> torch.Tensor:
        if self.augment:
            images = random_crop_flip(images, self.pad)
        return images_to_tensor(images, self.mean, self.std)


def random_crop_flip(images: np.ndarray, pad: int) -> np.ndarray:
    n, h, w, _ = images.shape
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    dy = torch.randint(0, 2 * pad + 1, (n,)).numpy()
    dx = torch.randint(0, 2 * pad + 1, (n,)).numpy()
    flip = torch.rand(n).numpy() < 0.5
    out = np.empty_like(images)
    for i in range(n):
        crop = padded[i, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = crop[:, ::-1] if flip[i] else crop
    return out


class ImageDataModule(ArrayDataModule):
    kind = "image"
    image_size = 32
    mean: tuple = (0.5, 0.5, 0.5)
    std: tuple = (0.25, 0.25, 0.25)

    def __init__(self, batch_size: int = 128, augment: bool = False, num_workers: int = 0,
                 seed: int | None = None, val_fraction: float = DEFAULT_VAL_FRACTION, split_seed: int = 0):
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed,
                         val_fraction=val_fraction, split_seed=split_seed)
        self.augment = augment

    @property
    def labels(self) -> list[str]:
        raise NotImplementedError

    def check_net(self, net) -> None:
        outputs, classes = (getattr(net, "config", None) or {}).get("num_classes"), len(self.labels)
        if outputs is not None and outputs < classes and not (outputs == 1 and classes == 2):
            raise ConfigError(f"the net has {outputs} output class(es) but the data {classes} labels; "
                              f"set model.net.num_classes={classes}")

    def transform(self, train: bool) -> ImageTransform:
        return ImageTransform(self.mean, self.std, augment=self.augment and train)

    def inference_info(self) -> dict:
        return {"kind": self.kind, "labels": list(self.labels), "image_size": self.image_size,
                "mean": list(self.mean), "std": list(self.std)}
