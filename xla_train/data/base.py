"""The data module every recipe shares: in-memory arrays, fixed-shape loaders.

Subclasses only say where the arrays come from and how a batch is turned into
tensors. Batch geometry lives here, in one place: the per-device batch, how
many devices one process feeds, and which share of a global batch is this
process's. Nothing here knows what kind of device runs the model.
"""
from __future__ import annotations

import os

import lightning.pytorch as pl
import numpy as np
from torch.utils.data import DataLoader
from typing_extensions import override

from xla_train import compat
from xla_train.data.batching import ArrayDataset, BatchSampler
from xla_train.errors import ConfigError

SPLITS = ("train", "val", "test")


def check_batch_size(batch_size: int) -> None:
    if batch_size <= 0 or batch_size % 8:
        raise ConfigError(
            f"batch_size={batch_size} is not a positive multiple of 8; XLA tiles tensors in "
            f"multiples of 8, so use e.g. {max(8, round(batch_size / 8) * 8)}")


class ArrayDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 128, num_workers: int = 0, seed: int | None = None):
        super().__init__()
        check_batch_size(batch_size)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        self._resume: dict | None = None

    # --- what a subclass provides -------------------------------------------
    def load_arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{'train'|'val'|'test': (inputs, int labels)}."""
        raise NotImplementedError

    def transform(self, train: bool):
        """A picklable callable: a batch of raw inputs -> a float tensor."""
        raise NotImplementedError

    def inference_info(self) -> dict:
        """What a checkpoint must carry so that raw inputs can be predicted without this module."""
        raise NotImplementedError

    def check_net(self, net) -> None:
        """Refuse a net that cannot take this data (a ConfigError); the CLI asks before any run folder exists."""

    # --- shared machinery -----------------------------------------------------
    @override
    def setup(self, stage: str | None = None) -> None:
        if self._arrays is None:
            self._arrays = self.load_arrays()

    def arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        self.setup()
        return self._arrays[split]

    def process_share(self) -> tuple[int, int, int]:
        """(per-process batch, rank, world size). One process may feed several devices (SPMD)."""
        t = self.trainer
        if t is None:
            return self.batch_size, 0, 1
        devices_per_process = max(1, t.num_devices * t.num_nodes // t.world_size)
        return self.batch_size * devices_per_process, t.global_rank, t.world_size

    def _split_loader(self, split: str, train: bool) -> DataLoader:
        inputs, labels = self.arrays(split)
        batch, rank, world = self.process_share()
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        sampler = BatchSampler(len(inputs), batch, train=train, seed=seed, rank=rank, world_size=world)
        if train and len(sampler) == 0:
            raise ConfigError(
                f"the {split} split has {len(inputs)} samples, fewer than one global batch of "
                f"{sampler.global_batch}; lower batch_size or use fewer devices")
        if train and self._resume is not None:
            sampler.resume_at(self._resume["epoch"], self._resume["batches_done"])
        return DataLoader(ArrayDataset(inputs, labels, self.transform(train)), batch_size=None,
                          sampler=sampler, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    @override
    def state_dict(self) -> dict:
        """Where training is in the data order, so that a resumed run neither skips nor repeats a batch."""
        t = self.trainer
        if t is None or not t.training:
            return {}
        return {"epoch": t.current_epoch, "batches_done": compat.batches_done(t)}

    @override
    def load_state_dict(self, state: dict) -> None:
        self._resume = dict(state) if state else None

    @override
    def train_dataloader(self) -> DataLoader:
        return self._split_loader("train", train=True)

    @override
    def val_dataloader(self) -> DataLoader:
        return self._split_loader("val", train=False)

    @override
    def test_dataloader(self) -> DataLoader:
        return self._split_loader("test", train=False)
