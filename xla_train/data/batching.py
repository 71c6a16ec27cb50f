"""Fixed-shape batches: every step of a run sees one input shape, so XLA compiles once.

Training drops the remainder of each epoch. Evaluation pads the last batch with
label -1 rows, which the task masks out, so every sample counts exactly once
and no batch has an odd shape. Sharding across processes happens here too, so
that every replica gets the same shape on every step.

A batch reaches the step in one of two forms, and the step turns it into the
net's input on whatever device runs it (`BatchInputs`). Streamed, it carries
its samples as stored (uint8 images, token ids), and the device normalises
them. Resident, it carries only the samples' indices into the splits, which
went to the device once (`data.on_device`), and the device gathers, augments
and normalises: the host sends a few hundred bytes a step. Both come from the
same sampler, so they hold the same samples in the same order.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

PAD_LABEL = -1


class BatchSampler(Sampler[np.ndarray]):
    """Yields index arrays of one process's share of each global batch; -1 marks padding."""

    def __init__(self, n: int, batch_size: int, *, train: bool, seed: int = 0,
                 rank: int = 0, world_size: int = 1):
        if n <= 0:
            raise ValueError("cannot batch an empty data set")
        self.n, self.batch_size, self.train = n, batch_size, train
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch = 0
        self.global_batch = batch_size * world_size
        self._skip: tuple[int, int] | None = None  # (epoch, batches already trained in it)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, batches_done: int) -> None:
        """The next pass over `epoch` starts after its first `batches_done` batches, in the same order."""
        self._skip = (epoch, batches_done)

    def __len__(self) -> int:
        if self.train:
            return self.n // self.global_batch
        return math.ceil(self.n / self.global_batch)

    def __iter__(self):
        if self.train:
            g = np.random.default_rng((self.seed, self.epoch))
            order = g.permutation(self.n)[: len(self) * self.global_batch]
        else:
            order = np.full(len(self) * self.global_batch, PAD_LABEL, dtype=np.int64)
            order[: self.n] = np.arange(self.n)
        start = 0
        if self._skip is not None and self._skip[0] == self.epoch:
            start, self._skip = self._skip[1], None
        for b in order.reshape(len(self), self.world_size, self.batch_size)[start:, self.rank]:
            yield b


class ArrayDataset(Dataset):
    """Serves whole batches by one gather from in-memory arrays (no per-sample collation)."""

    def __init__(self, inputs: np.ndarray, labels: np.ndarray, transform=None):
        if len(inputs) != len(labels):
            raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels")
        self.inputs, self.labels, self.transform = inputs, np.asarray(labels, dtype=np.int64), transform

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, idx: np.ndarray):
        idx = np.asarray(idx)
        pad = idx < 0
        safe = np.where(pad, 0, idx)
        x = self.inputs[safe]
        y = np.where(pad, PAD_LABEL, self.labels[safe])
        x = self.transform(x) if self.transform is not None else torch.as_tensor(x)
        return x, torch.as_tensor(y)


class IndexBatches(Dataset):
    """Serves the sampler's index arrays themselves (-1 for padding), as a 1-tuple: the resident form."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: np.ndarray):
        return (torch.as_tensor(np.asarray(idx, dtype=np.int64)),)


class BatchInputs:
    """A loaded batch -> (net input, labels), on the batch's device. `prepare(x, augment)` is the data's own
    device-side step (normalising images; nothing for token ids)."""

    def __init__(self, prepare, augment: bool = False):
        self.prepare, self.augment = prepare, augment

    def __call__(self, batch, split: str, train: bool):
        raise NotImplementedError


class StreamedInputs(BatchInputs):
    """(samples as stored, labels), augmented on the host if at all."""

    def __call__(self, batch, split: str, train: bool):
        x, y = batch[0], batch[1]
        return self.prepare(x, augment=False), y


class ResidentInputs(BatchInputs):
    """(indices,) into the splits, which go to the batch's device at their first use and stay there."""

    def __init__(self, arrays: dict[str, tuple[np.ndarray, np.ndarray]], prepare, augment: bool = False):
        super().__init__(prepare, augment)
        self.arrays = arrays
        self._tables: dict = {}

    def __getstate__(self) -> dict:  # a pickled copy (xla_mp workers) uploads its own
        return {**self.__dict__, "_tables": {}}

    def table(self, split: str, device) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.arrays[split]
        key = (id(x), str(device))  # val_fraction=0: "val" is the test split, held once
        if key not in self._tables:
            self._tables[key] = (torch.from_numpy(np.ascontiguousarray(x)).to(device),
                                 torch.from_numpy(np.asarray(y, dtype=np.int64)).to(device))
        return self._tables[key]

    def __call__(self, batch, split: str, train: bool):
        (idx,) = batch
        xs, ys = self.table(split, idx.device)
        safe = idx.clamp(min=0)
        y = torch.where(idx < 0, torch.full_like(idx, PAD_LABEL), ys[safe])
        return self.prepare(xs[safe], augment=self.augment and train), y


def nbytes(arrays: dict[str, tuple[np.ndarray, np.ndarray]]) -> int:
    """What the distinct splits' inputs and labels (int64 on the device) take."""
    distinct = {id(x): (x, y) for x, y in arrays.values()}
    return sum(x.nbytes + len(y) * 8 for x, y in distinct.values())
