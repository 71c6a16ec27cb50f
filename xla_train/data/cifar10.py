"""CIFAR-10 from torchvision's real on-disk layout (pickled batches plus batches.meta), with its checksums.

The download is staged (data/download.py), so a failed or interrupted one never
leaves a folder that a later run would take for a good one. Validation holds out val_fraction (default
0.1: 5,000) of the 50,000 training images, stratified; val_fraction=0 validates on the test split, as
the Keras tutorial does.
"""

from __future__ import annotations

import os

from xla_train.data.download import staged_download
from xla_train.data.image_base import ImageDataModule
from xla_train.errors import DataError
from xla_train.preprocess.images import CIFAR10_MEAN, CIFAR10_STD

DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".cache", "xla_train", "cifar10")


def _cifar_class():
    from torchvision.datasets import CIFAR10

    return CIFAR10


def files_intact(cls, root: str) -> bool:
    """Every file of the data set present with its MD5, as torchvision's CIFAR10 checks it before reading."""
    from torchvision.datasets import utils

    folder = os.path.join(root, cls.base_folder)
    return all(utils.check_integrity(os.path.join(folder, name), md5) for name, md5 in cls.train_list + cls.test_list)


def download_cifar10(root: str) -> None:
    """Fetch and verify cifar-10-python.tar.gz, then move the extracted folder into `root` atomically."""
    cls = _cifar_class()
    staged_download(
        "CIFAR-10", cls.url, cls.filename, cls.tgz_md5, root, cls.base_folder, present=lambda: files_intact(cls, root)
    )


def load_cifar10(root: str, download: bool) -> dict:
    cls = _cifar_class()
    folder = os.path.join(root, cls.base_folder)
    if not files_intact(cls, root):
        if download:
            download_cifar10(root)
        if not files_intact(cls, root):
            what = "is incomplete or fails its checksums" if os.path.isdir(folder) else "is missing"
            raise DataError(
                f"CIFAR-10 at {folder} {what}; download {cls.url} ({cls.filename}) and extract it "
                f"into {root}, or run with download=true on a machine with network"
            )
    try:
        train = cls(root, train=True, download=False)
        test = cls(root, train=False, download=False)
    except Exception as e:
        raise DataError(f"CIFAR-10 at {folder} cannot be read ({type(e).__name__}: {e})") from None
    return {"train": (train.data, train.targets), "test": (test.data, test.targets), "classes": train.classes}


class CIFAR10DataModule(ImageDataModule):
    mean = CIFAR10_MEAN
    std = CIFAR10_STD

    def __init__(self, data_dir: str | None = None, download: bool = True, **settings):
        super().__init__(**settings)
        self.data_dir = os.path.expanduser(data_dir or DEFAULT_DATA_DIR)
        self.download = download
        self._classes: list[str] | None = None

    @property
    def labels(self) -> list[str]:
        self.setup()
        return self._classes

    def load_arrays(self):
        d = load_cifar10(self.data_dir, self.download)
        self._classes = list(d["classes"])
        return {"train": d["train"], "test": d["test"]}
