"""Predicting a whole split through Lightning, on whatever the hardware plan chose: every sample once, in order.

Lightning's prediction writer keeps one core's share on several TPU cores (Lightning #11417), so here the split is
read in fixed global batches (data/batching.py) whose last is padded with index -1 rows, dropped after the step:
the shape never changes and XLA compiles once. Each row carries its sample index, so results go back in the data's
order. One process only: SPMD feeds every device of the host from it, so nothing is gathered between processes
(docs/serving.md, "Predict a split").
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from xla_train.data.batching import PAD_LABEL, ArrayDataset, BatchInputs, BatchSampler, IndexBatches
from xla_train.errors import ConfigError
from xla_train.objective import probabilities
from xla_train.runtime.registry import backend_of_strategy


class IndexedBatches(Dataset):
    """ArrayDataset's batches with each row's sample index added (-1 for padding)."""

    def __init__(self, inputs: np.ndarray, labels: np.ndarray, transform):
        self.rows = ArrayDataset(inputs, labels, transform)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx: np.ndarray):
        x, y = self.rows[idx]
        return x, y, torch.as_tensor(np.where(np.asarray(idx) < 0, PAD_LABEL, idx).astype(np.int64))


class SplitPredictor(pl.LightningModule):
    """The trained net, returning (probabilities, label, index) per batch; nothing is read on the host here.
    A batch is the data module's (streamed, or resident indices) with the rows' sample indices last."""

    def __init__(self, net: nn.Module, inputs: BatchInputs, split: str):
        super().__init__()
        self.net, self.inputs, self.split = net, inputs, split

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def program_inputs(self, train: bool):
        """As the Classifier's (training/module.py): the resident splits, for a runtime that passes them in."""
        return self.inputs.program_inputs(train)

    def reading(self, tensors):
        return self.inputs.reading(tensors)

    @override
    def predict_step(self, batch, batch_idx):
        x, y = self.inputs(batch, self.split, train=False)
        return probabilities(self.net(x)), y, batch[-1]


class CompileCount(pl.Callback):
    """XLA graphs compiled for the first batch, and after it (torch_xla's host-side counters, no device read).

    The first batch's outputs reach the CPU after its on_predict_batch_end, so its graphs are counted up to the
    start of the second batch."""

    def __init__(self) -> None:
        self.first = self.after = 0
        self._start = self._second = None

    @override
    def on_predict_epoch_start(self, trainer, pl_module) -> None:
        self._start = backend_of_strategy(trainer.strategy).counters()[0]

    @override
    def on_predict_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == 1:
            self._second = backend_of_strategy(trainer.strategy).counters()[0]

    @override
    def on_predict_epoch_end(self, trainer, pl_module) -> None:
        now = backend_of_strategy(trainer.strategy).counters()[0]
        second = now if self._second is None else self._second
        self.first, self.after = second - self._start, now - second


@dataclass
class SplitPredictions:
    probs: np.ndarray  # (N, classes), in the data's order
    labels: np.ndarray  # (N,) true labels
    graphs_first_batch: int
    graphs_after_first_batch: int
    global_batch: int
    batches: int
    device: str
    compiled: bool  # the device compiles its graphs (XLA): the graph counts above mean something


def predict_arrays(net: nn.Module, dm, split: str, trainer_kwargs: dict) -> SplitPredictions:
    """Every row of the data module's split through `net` on the Trainer that `trainer_kwargs` (runtime.plan)
    describe, fed as the module's place() decided (resident or streamed)."""
    inputs, labels = dm.arrays(split)
    batch_size = dm.batch_size
    count = CompileCount()
    trainer = pl.Trainer(
        **trainer_kwargs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        callbacks=[count],
    )
    if trainer.world_size != 1:
        raise ConfigError(
            f"predicting a split runs in one process, and this hardware plan has {trainer.world_size}; "
            f"on XLA use strategy=spmd (the default), on a GPU devices=1"
        )
    global_batch = batch_size * trainer.num_devices
    sampler = BatchSampler(len(inputs), global_batch, train=False)
    rows = IndexBatches(len(inputs)) if dm.resident else IndexedBatches(inputs, labels, dm.transform(False))
    loader = DataLoader(rows, batch_size=None, sampler=sampler)
    out = trainer.predict(SplitPredictor(net, dm.batch_inputs(), split), dataloaders=loader, return_predictions=True)
    probs = torch.cat([p for p, _, _ in out]).float().numpy()
    index = torch.cat([i for _, _, i in out]).numpy()
    keep = index >= 0
    probs, index = probs[keep], index[keep]
    if not np.array_equal(np.sort(index), np.arange(len(inputs))):  # a lost or doubled sample is a bug, never a file
        raise RuntimeError(f"split prediction returned {len(index)} rows for {len(inputs)} samples")
    order = np.argsort(index)
    backend, n = backend_of_strategy(trainer.strategy), trainer.num_devices  # JAX's runs on no torch device
    device = backend.describe(trainer.strategy.root_device) + (f" x{n}" if n > 1 else "")
    return SplitPredictions(
        probs[order],
        np.asarray(labels, dtype=np.int64),
        count.first,
        count.after,
        global_batch,
        len(sampler),
        device,
        backend.compiles_steps,
    )
