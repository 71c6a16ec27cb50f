"""The offline quickstart data: scikit-learn's 1,797 real handwritten digits as 32x32 RGB.

They ship inside scikit-learn, so the first run needs no network, and they are
real images with a real held-out split, so its accuracy means something.
"""

from __future__ import annotations

import numpy as np

from xla_train.data.image_base import ImageDataModule
from xla_train.errors import ConfigError
from xla_train.preprocess.images import resize_images


def load_digits_rgb32() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    gray = (d.images * (255.0 / 16.0)).round().astype(np.uint8)  # (N, 8, 8), 0..16 -> 0..255
    rgb = np.repeat(gray[..., None], 3, axis=-1)
    return resize_images(rgb, 32), d.target.astype(np.int64)


class DigitsDataModule(ImageDataModule):
    mean = (0.14, 0.14, 0.14)
    std = (0.27, 0.27, 0.27)

    def __init__(self, batch_size: int = 32, test_fraction: float = 0.2, **settings):
        super().__init__(batch_size=batch_size, **settings)
        if not 0.0 < test_fraction < 1.0:
            raise ConfigError(
                f"test_fraction={test_fraction} must be in (0, 1): the share of the digits held "
                f"out for the final test (default 0.2)"
            )
        self.test_fraction = test_fraction

    @property
    def labels(self) -> list[str]:
        return [str(i) for i in range(10)]

    def load_arrays(self):
        from sklearn.model_selection import train_test_split

        x, y = load_digits_rgb32()
        x_rest, x_test, y_rest, y_test = train_test_split(
            x, y, test_size=self.test_fraction, stratify=y, random_state=self.split_seed
        )
        return {"train": (x_rest, y_rest), "test": (x_test, y_test)}  # validation: carved by BaseDataModule
