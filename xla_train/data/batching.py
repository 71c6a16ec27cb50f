"""Fixed-shape batches: every step of a run sees one input shape, so XLA compiles once.

Training drops each epoch's remainder; evaluation pads the last batch with label -1 rows that the task masks out,
so every sample counts once. Sharding across processes happens here, so every replica gets the same shape. A batch
is streamed (samples as stored) or resident (indices into splits already on the device; a training batch is just
the step's number), both from one sampler, so they hold the same samples in the same order; `BatchInputs` turns
either into the net's input on the device (docs/feeding.md, "Keep a TPU fed").
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

PAD_LABEL = -1
EVAL_SPLITS = ("val", "test")  # resident, they share one table on the device (ResidentInputs.table)


class BatchSampler(Sampler[np.ndarray]):
    """Yields index arrays of one process's share of each global batch; -1 marks padding."""

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        train: bool,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        step_numbers: bool = False,
    ):
        if n <= 0:
            raise ValueError("cannot batch an empty data set")
        self.n, self.batch_size, self.train = n, batch_size, train
        self.step_numbers = step_numbers  # yield each batch's number in the epoch instead of its indices
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch = 0
        self.global_batch = batch_size * world_size
        self._skip: tuple[int, int] | None = None  # (epoch, batches already trained in it)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, batches_done: int) -> None:
        """The next pass over `epoch` starts after its first `batches_done` batches, in the same order. The sampler
        is at that epoch from now on: a resumed run's loader is iterated before Lightning sets the epoch, and a
        loader with workers reads its first indices then."""
        self.epoch, self._skip = epoch, (epoch, batches_done)

    def __len__(self) -> int:
        if self.train:
            return self.n // self.global_batch
        return math.ceil(self.n / self.global_batch)

    def rows(self) -> np.ndarray:
        """This process's indices for every batch of the current epoch, (batches, batch_size); -1 is padding."""
        if self.train:
            g = np.random.default_rng((self.seed, self.epoch))
            order = g.permutation(self.n)[: len(self) * self.global_batch]
        else:
            order = np.full(len(self) * self.global_batch, PAD_LABEL, dtype=np.int64)
            order[: self.n] = np.arange(self.n)
        return order.reshape(len(self), self.world_size, self.batch_size)[:, self.rank]

    def __iter__(self):
        start = 0
        if self._skip is not None and self._skip[0] == self.epoch:
            start, self._skip = self._skip[1], None
        if self.step_numbers:
            yield from (np.array(i, dtype=np.int64) for i in range(start, len(self)))
            return
        yield from self.rows()[start:]


class EpochOrder:
    """The training sampler, shared by the data module that builds the loader and the inputs that read its order."""

    sampler: BatchSampler | None = None

    def key(self) -> tuple[int, int]:
        """Which order the loader is serving now (its epoch, and which sampler): cheap, read every step."""
        if self.sampler is None:
            raise RuntimeError("the training loader has not been built")
        return self.sampler.epoch, id(self.sampler)

    def rows(self) -> np.ndarray:
        """That order's rows: a permutation of the split, drawn only when it goes to the device."""
        return self.sampler.rows()


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
    """Serves what the sampler yields (index arrays, -1 for padding, or step numbers) as a 1-tuple: the resident
    form."""

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
        self.place_rows = None  # (rows, ...) host tensor -> device, as the strategy places a batch; None: .to()

    def __call__(self, batch, split: str, train: bool):
        raise NotImplementedError

    def execution_inputs(self, device) -> list[torch.Tensor]:
        """Device tensors that training steps read and that change between epochs, not between steps: a K-step
        program takes them as inputs once per execution."""
        return []

    def program_inputs(self, train: bool) -> dict[str, tuple[np.ndarray, bool]]:
        """What a training (or evaluation) step reads besides its batch, as host arrays by name, each with whether its
        rows are split over the devices as a batch's are: for a runtime whose programs take every input explicitly
        (runtime=jax), which uploads them once and passes them in; `reading` then hands the step their device copies."""
        return {}

    @contextlib.contextmanager
    def reading(self, tensors: dict[str, torch.Tensor]):
        """While a step is traced: `tensors` (program_inputs' arrays, as the program's inputs) in place of uploads."""
        yield


class StreamedInputs(BatchInputs):
    """(samples as stored, labels), augmented on the host if at all."""

    def __call__(self, batch, split: str, train: bool):
        x, y = batch[0], batch[1]
        return self.prepare(x, augment=False), y


class ResidentInputs(BatchInputs):
    """(indices,) into the splits, which go to the batch's device at their first use and stay there; or (a
    training step's number,), whose indices are its row of the epoch's order, on the device too.

    `place_rows` puts a (batch rows, ...) host tensor on the device as a loaded batch is placed (under SPMD: split
    over the devices), so that each device holds only its rows of the order; the trainer's strategy sets it.
    """

    def __init__(
        self,
        arrays: dict[str, tuple[np.ndarray, np.ndarray]],
        prepare,
        augment: bool = False,
        order: EpochOrder | None = None,
    ):
        super().__init__(prepare, augment)
        self.arrays, self.order = arrays, order
        self._reading: dict | None = None  # a traced step's inputs (`reading`), in place of the uploads below
        self._host: dict = {}  # program_inputs' arrays made here, kept so that each is uploaded once
        self._tables: dict = {}
        self._order: tuple = (None, None)  # (key, the epoch's order on the device, (batch rows, steps))

    def __getstate__(self) -> dict:  # a pickled copy (xla_mp workers) uploads its own
        return {
            **self.__dict__,
            "_tables": {},
            "_order": (None, None),
            "place_rows": None,
            "_reading": None,
            "_host": {},
        }

    def table(self, split: str, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(inputs, labels, the split's first row in them) on the device; the training split's table is its own
        (first row None). The evaluation splits share one, end to end (val_fraction=0: "val" is the test split,
        held once), and the first row is a 1-element tensor of data, not a constant, so validation and test
        batches are one program: with a table each, their shapes differed and each compiled its own."""
        if self._reading is not None:
            r = self._reading
            return (
                (r["train_x"], r["train_y"], None)
                if split not in EVAL_SPLITS
                else (r["eval_x"], r["eval_y"], r[f"{split}_first"])
            )
        if split not in EVAL_SPLITS:
            x, y = self.arrays[split]
            key = (id(x), str(device))
            if key not in self._tables:
                self._tables[key] = self._upload([(x, y)], device)
            return (*self._tables[key], None)
        key, start_key = ("eval", str(device)), (split, str(device))
        if start_key not in self._tables:  # once a split and device, not at every batch
            parts = {id(self.arrays[s][0]): self.arrays[s] for s in EVAL_SPLITS}  # distinct, in EVAL_SPLITS' order
            if key not in self._tables:
                self._tables[key] = self._upload(list(parts.values()), device)
            first = dict(zip(parts, np.cumsum([0] + [len(x) for x, _ in parts.values()]).tolist()))
            start = first[id(self.arrays[split][0])]
            self._tables[start_key] = torch.tensor([start], dtype=torch.int64).to(device)  # 1-D: data, not IR
        return (*self._tables[key], self._tables[start_key])

    @staticmethod
    def _upload(parts: list[tuple[np.ndarray, np.ndarray]], device) -> tuple[torch.Tensor, torch.Tensor]:
        x = parts[0][0] if len(parts) == 1 else np.concatenate([x for x, _ in parts])
        y = np.concatenate([np.asarray(y, dtype=np.int64) for _, y in parts])
        return torch.from_numpy(np.ascontiguousarray(x)).to(device), torch.from_numpy(y).to(device)

    def epoch_order(self, device) -> torch.Tensor:
        """The current epoch's order, transposed so that dimension 0 is the batch's rows; one upload an epoch."""
        if self._reading is not None:
            return self._reading["order"]
        key = (*self.order.key(), str(device))
        if self._order[0] != key:
            self._order = (None, None)  # the previous epoch's goes first
            host = torch.from_numpy(np.ascontiguousarray(self.order.rows().T))
            self._order = (key, self.place_rows(host) if self.place_rows is not None else host.to(device))
        return self._order[1]

    def execution_inputs(self, device) -> list[torch.Tensor]:
        return [self.epoch_order(device)] if self.order is not None and self.order.sampler is not None else []

    def program_inputs(self, train: bool) -> dict[str, tuple[np.ndarray, bool]]:
        """Training: its table and the epoch's order; evaluation: the evaluation splits' table, end to end, and each
        split's first row in it."""
        if train:
            x, y = self.arrays["train"]
            out = {"train_x": (x, False), "train_y": (y, False)}
            if self.order is not None and self.order.sampler is not None:
                key = self.order.key()
                if self._host.get("order", (None,))[0] != key:  # one order an epoch, made when it goes to the device
                    self._host["order"] = (key, np.ascontiguousarray(self.order.rows().T))
                out["order"] = (self._host["order"][1], True)
            return out
        if "eval" not in self._host:  # made once, so that a runtime uploads it once
            parts = {id(self.arrays[s][0]): self.arrays[s] for s in EVAL_SPLITS}
            starts = dict(zip(parts, np.cumsum([0] + [len(x) for x, _ in parts.values()]).tolist()))
            x = np.concatenate([x for x, _ in parts.values()]) if len(parts) > 1 else next(iter(parts.values()))[0]
            y = np.concatenate([np.asarray(y, dtype=np.int64) for _, y in parts.values()])
            first = {s: np.array([starts[id(self.arrays[s][0])]], dtype=np.int64) for s in EVAL_SPLITS}
            self._host["eval"] = (x, y, first)
        x, y, first = self._host["eval"]
        return {"eval_x": (x, False), "eval_y": (y, False), **{f"{s}_first": (v, False) for s, v in first.items()}}

    @contextlib.contextmanager
    def reading(self, tensors: dict[str, torch.Tensor]):
        self._reading = tensors
        try:
            yield
        finally:
            self._reading = None

    def __call__(self, batch, split: str, train: bool):
        (idx,) = batch
        if idx.dim() == 0:  # a training step's number: its indices are that column of the epoch's order
            idx = self.epoch_order(idx.device).index_select(1, idx.unsqueeze(0)).squeeze(1)  # not [:, idx]: .item()
        xs, ys, first = self.table(split, idx.device)
        safe = idx.clamp(min=0) if first is None else idx.clamp(min=0) + first
        y = torch.where(idx < 0, torch.full_like(idx, PAD_LABEL), ys[safe])
        return self.prepare(xs[safe], augment=self.augment and train), y


def nbytes(arrays: dict[str, tuple[np.ndarray, np.ndarray]]) -> int:
    """What the distinct splits' inputs and labels (int64 on the device) take."""
    distinct = {id(x): (x, y) for x, y in arrays.values()}
    return sum(x.nbytes + len(y) * 8 for x, y in distinct.values())
