"""A folder of images by class, DIR/train/CLASS/*.png|jpg|jpeg (and DIR/test/CLASS/ if there is one).

Each image is decoded and resized once, with the decoder `predict` and the server use, to image_size x image_size
RGB, and held as uint8 like CIFAR-10; the channel statistics come from the training images and travel in the
checkpoint. Class names are the folder names, sorted (docs/own_model.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xla_train.data.base import with_test_split
from xla_train.data.folders import IMAGE_SUFFIXES, folder_splits
from xla_train.data.image_base import MeasuredImageDataModule
from xla_train.errors import ConfigError, DataError, UserError
from xla_train.preprocess.images import decode_image


class ImageFolderDataModule(MeasuredImageDataModule):
    def __init__(
        self,
        path: str | None = None,
        image_size: int = 32,
        test_fraction: float = 0.2,
        batch_size: int = 32,
        **settings,
    ):
        super().__init__(batch_size=batch_size, **settings)
        if image_size < 8:
            raise ConfigError(f"image_size={image_size} must be at least 8 (pixels a side)")
        self.path, self.image_size, self.test_fraction = path, image_size, test_fraction

    def load_arrays(self):
        if not self.path:
            raise ConfigError("recipe=images needs its folder: data.path=DIR, holding DIR/train/CLASS/*.png|jpg")
        root = Path(self.path).expanduser()
        if not root.is_dir():
            raise DataError(f"data.path={self.path} is not a folder; give DIR holding DIR/train/CLASS/*.png|jpg")
        names, splits = folder_splits(root, IMAGE_SUFFIXES, "images")
        arrays = {split: (self._decode(files), labels) for split, (files, labels) in splits.items()}
        arrays = with_test_split(arrays, self.test_fraction, self.split_seed, str(root))
        self.measured(names, arrays["train"][0])  # the test share unseen
        return arrays

    def _decode(self, files: list[Path]) -> np.ndarray:
        out = np.empty((len(files), self.image_size, self.image_size, 3), np.uint8)
        for i, f in enumerate(files):
            try:
                out[i] = decode_image(f, self.image_size, str(f))
            except UserError as e:
                raise DataError(f"{e}, or remove it from the folder") from None
        return out
