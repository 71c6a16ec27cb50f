"""The data module every recipe shares: in-memory arrays, fixed-shape loaders.

Subclasses only say where the arrays come from and how a batch is turned into
tensors. Batch geometry lives here, in one place: the per-device batch, how
many devices one process feeds, and which share of a global batch is this
process's. Nothing here knows what kind of device runs the model.
"""

from __future__ import annotations

import inspect
import os
from typing import Literal, Union

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader
from typing_extensions import override

from xla_train import compat
from xla_train.data.batching import (
    ArrayDataset,
    BatchInputs,
    BatchSampler,
    EpochOrder,
    IndexBatches,
    ResidentInputs,
    StreamedInputs,
    nbytes,
)
from xla_train.errors import ConfigError

OnDevice = Union[bool, Literal["auto"]]

SPLITS = ("train", "val", "test")
DEFAULT_VAL_FRACTION = 0.1


def check_batch_size(batch_size: int) -> None:
    if batch_size <= 0 or batch_size % 8:
        raise ConfigError(
            f"batch_size={batch_size} is not a positive multiple of 8; XLA tiles tensors in "
            f"multiples of 8, so use e.g. {max(8, round(batch_size / 8) * 8)}"
        )


def check_val_fraction(val_fraction: float) -> None:
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(
            f"val_fraction={val_fraction} must be in [0, 1): the share of the training split held "
            f"out for validation (default {DEFAULT_VAL_FRACTION}; 0 validates on the test split)"
        )


def validation_size(n: int, val_fraction: float) -> int:
    """How many of n training samples validation takes: one number, shared with the bench's published sizes."""
    return max(1, round(n * val_fraction)) if val_fraction else 0


def carve_validation(labels: np.ndarray, val_fraction: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices), stratified by label.

    The seed is fixed and local (never the global RNG, never the run's seed), so
    every run and every host holds out the same samples, and a resumed run too.
    """
    return carve(
        labels,
        validation_size(len(labels), val_fraction),
        split_seed,
        f"val_fraction={val_fraction}",
        "validation",
        "raise val_fraction, or set val_fraction=0 to validate on the test split",
    )


def carve(labels, n: int, split_seed: int, key: str, what: str, fix: str) -> tuple[np.ndarray, np.ndarray]:
    """(kept indices, n held-out indices), stratified by label, from a fixed local seed."""
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels)
    try:
        return train_test_split(np.arange(len(labels)), test_size=n, stratify=labels, random_state=split_seed)
    except ValueError as e:  # a class with one sample, or fewer held-out samples than classes
        raise ConfigError(
            f"{key} cannot hold out a stratified {what} set from {len(labels)} training samples ({e}); {fix}"
        ) from None


def with_test_split(arrays: dict, test_fraction: float, split_seed: int, source: str) -> dict:
    """The arrays with a test split: their own, or test_fraction of the training split held out (stratified, its
    own seed) when the data came without one."""
    if "test" in arrays:
        return arrays
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(
            f"test_fraction={test_fraction} must be in (0, 1): {source} has no test split, so that share of its "
            f"training samples is held out for the final test"
        )
    x, y = arrays["train"][0], np.asarray(arrays["train"][1])
    keep, test = carve(
        y,
        max(1, round(len(y) * test_fraction)),
        split_seed,
        f"test_fraction={test_fraction}",
        "test",
        "raise test_fraction, or give the data a test split",
    )
    return {**arrays, "train": (x[keep], y[keep]), "test": (x[test], y[test])}


def too_few_samples(split: str, n: int, global_batch: int) -> ConfigError:
    return ConfigError(
        f"the {split} split has {n} samples, fewer than one global batch of {global_batch}; lower batch_size "
        f"or use fewer devices"
    )


def check_logits(out, n: int, labels: list[str], net_class: type) -> None:
    """Refuse in one line an output that is not one logit row per sample fitting the labels: (N, C) for C
    classes, or (N,) or (N, 1) for two (a binary classifier's one logit, as the IMDB LSTM has)."""
    classes = len(labels)
    shown = ", ".join(labels[:5]) + (", ..." if classes > 5 else "")
    if classes < 2:  # no last layer fits: a classifier tells at least two classes apart
        raise ConfigError(f"the data has {classes} class ({shown}); a classifier needs samples of at least two classes")
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        what = f"a {type(out).__name__}" if not isinstance(out, torch.Tensor) else f"{out.dtype} values"
        raise ConfigError(f"the net ({net_class.__name__}) returns {what}; it must return one float tensor of logits")
    binary = out.ndim == 1 or (out.ndim == 2 and out.shape[1] == 1)
    if out.ndim not in (1, 2) or out.shape[0] != n:
        raise ConfigError(
            f"the net ({net_class.__name__}) returns shape {tuple(out.shape)} for {n} samples; a classifier returns "
            f"({n}, classes) logits, or ({n},) / ({n}, 1) for two classes"
        )
    if (binary and classes == 2) or (not binary and out.shape[1] == classes):
        return
    gives = 1 if binary else out.shape[1]
    hint = f"; set model.net.num_classes={classes}" if "num_classes" in inspect.signature(net_class).parameters else ""
    raise ConfigError(
        f"the net ({net_class.__name__}) gives {gives} logit(s) per sample but the data has {classes} classes "
        f"({shown}); its last layer must give {classes}{' (or 1: one logit for two classes)' if classes == 2 else ''}"
        f"{hint}"
    )


def megabytes(n: int) -> str:
    mb = n / 2**20
    return f"{mb:,.0f} MB" if mb >= 10 else f"{mb:.2g} MB"


def keep(x, augment: bool = False):
    return x


class BaseDataModule(pl.LightningDataModule):
    """Every data module's base, and the one place its shared settings are declared: batch_size, num_workers, seed,
    val_fraction, split_seed and on_device. A subclass takes its own settings and passes the rest on as
    `**settings`; jsonargparse follows them here, so every module keeps the same flat keys (data.batch_size=...).

    val_fraction > 0 holds out that share of the training split for validation (checkpoint choice,
    early stopping), so the test split is seen only by the final test. val_fraction=0 validates on the
    test split, as the Keras tutorials did; then the test accuracy is not a held-out figure."""

    def __init__(
        self,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int | None = None,
        val_fraction: float = DEFAULT_VAL_FRACTION,
        split_seed: int = 0,
        on_device: OnDevice = "auto",
    ):
        super().__init__()
        check_batch_size(batch_size)
        check_val_fraction(val_fraction)
        if num_workers < 0:
            raise ConfigError(f"num_workers={num_workers} must be 0 (load in this process) or more")
        if not 0 <= split_seed < 2**32:
            raise ConfigError(f"split_seed={split_seed} must be in [0, 2**32): it fixes which samples validation holds")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.val_fraction, self.split_seed = val_fraction, split_seed
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        self._resume: dict | None = None
        self.on_device = on_device
        self.resident = False  # decided by place() for the hardware that runs: off until then
        self._train_order = EpochOrder()  # the training loader's sampler, which resident steps read on the device
        self.placement = "streamed from the host"

    # --- what a subclass provides -------------------------------------------
    def load_arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{'train'|'test': (inputs, int labels)}; 'val' too only if the data set has its own validation split
        (otherwise it is carved out of 'train' here, see val_fraction)."""
        raise NotImplementedError

    def transform(self, train: bool):
        """A picklable callable on the host: a batch of raw inputs -> the tensor the loader sends, in its stored
        dtype (uint8 images, int64 token ids); augmented there when streamed."""
        raise NotImplementedError

    def preparer(self):
        """A picklable callable for the device that holds a batch: (the sent tensor, augment) -> the net's input
        (normalising, augmenting). Token ids go in as they are."""
        return keep

    def inference_info(self) -> dict:
        """What a checkpoint must carry so that raw inputs can be predicted without this module."""
        raise NotImplementedError

    def net_inputs(self, raw):
        """Raw inputs -> the net's input on the CPU, as evaluation prepares them (no augmentation)."""
        return self.preparer()(self.transform(False)(raw), augment=False)

    @property
    def labels(self) -> list[str]:
        """The class names in label order: label k is labels[k]."""
        raise NotImplementedError

    def adopt(self, block: dict) -> None:
        """Prepare inputs as the checkpoint `block` records (validate, test, resume, a split's prediction): what a
        module derives from its data (a vocabulary, channel statistics) is taken from the checkpoint instead."""

    def probe_inputs(self) -> torch.Tensor:
        """Two training samples as the net gets them, on the CPU: what check_net runs the net on."""
        return self.net_inputs(self.arrays("train")[0][:2])

    def probe_hint(self, error: Exception) -> str:
        """What usually makes a net fail this way on this data, said after its error (text: the vocabulary)."""
        return ""

    def check_net(self, net) -> None:
        """One forward pass on two training samples, on the CPU, in eval mode and without gradients (no random
        number is drawn, no statistic moves), before anything runs: a net that cannot take this data, or whose
        output does not fit its labels, is refused in one line (a ConfigError), before any run folder exists."""
        x = self.probe_inputs()
        was_training = net.training
        net.eval()
        try:
            with torch.no_grad():
                out = net(x)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ConfigError(
                f"the net ({type(net).__name__}) cannot take this data: on a CPU batch of shape {tuple(x.shape)} "
                f"{str(x.dtype).replace('torch.', '')} its forward raised {type(e).__name__}: {first}"
                f"{self.probe_hint(e)}"
            ) from None
        finally:
            net.train(was_training)
        check_logits(out, len(x), self.labels, type(net))

    def check_one_batch(self, devices: int) -> None:
        """A training epoch keeps whole global batches only (fixed shapes); a train split with fewer samples than
        one is refused here, before any run folder exists or anything compiles."""
        n, global_batch = len(self.arrays("train")[1]), self.batch_size * devices
        if n < global_batch:
            raise too_few_samples("train", n, global_batch)

    # --- shared machinery -----------------------------------------------------
    @override
    def setup(self, stage: str | None = None) -> None:
        if self._arrays is None:
            self._arrays = self._with_validation(self.load_arrays())

    @property
    def test_is_held_out(self) -> bool:
        """Whether the test split is seen by nothing but the final test (validation, which chooses the
        checkpoint, is another split)."""
        self.setup()
        return self._arrays["val"] is not self._arrays["test"]

    def _with_validation(self, arrays: dict) -> dict:
        if "val" in arrays:
            return arrays
        if not self.val_fraction:
            return {**arrays, "val": arrays["test"]}
        inputs, labels = arrays["train"][0], np.asarray(arrays["train"][1])
        fit, val = carve_validation(labels, self.val_fraction, self.split_seed)
        return {**arrays, "train": (inputs[fit], labels[fit]), "val": (inputs[val], labels[val])}

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

    # --- where the data lives ---------------------------------------------------
    def place(self, auto_on: bool, budget_bytes: int) -> str:
        """Decide whether the splits go to the device once (resident) or stream from the host, from on_device,
        whether `auto` turns it on for this hardware, and the device-memory budget; returns the decision in
        words. on_device=true over the budget is refused here, before any run folder exists."""
        size = nbytes({s: self.arrays(s) for s in SPLITS})
        mb, budget = megabytes(size), megabytes(budget_bytes)
        if self.on_device is True and size > budget_bytes:
            raise ConfigError(
                f"data.on_device=true: the splits take {mb} on each device, over the {budget} "
                f"budget for device-resident data (device_data_mb); use on_device=auto or false (streamed "
                f"from the host), or a larger device_data_mb"
            )
        if self.on_device is True:
            self.resident, self.placement = True, f"on the device ({mb} per device; on_device=true)"
        elif self.on_device is False:
            self.resident, self.placement = False, "streamed from the host as stored (on_device=false)"
        elif not auto_on:
            self.resident, self.placement = (
                False,
                ("streamed from the host as stored (on_device=auto streams on this accelerator)"),
            )
        elif size > budget_bytes:
            self.resident, self.placement = (
                False,
                (
                    f"streamed from the host as stored (on_device=auto: {mb} is over the {budget} budget of device_data_mb)"
                ),
            )
        else:
            self.resident, self.placement = (
                True,
                f"on the device ({mb} per device, within the {budget} budget of device_data_mb)",
            )
        return self.placement

    def batch_inputs(self) -> BatchInputs:
        """What a step does to a loaded batch, on its device (data/batching.py)."""
        augment = bool(getattr(self, "augment", False))
        if self.resident:
            return ResidentInputs({s: self.arrays(s) for s in SPLITS}, self.preparer(), augment, self._train_order)
        return StreamedInputs(self.preparer())

    def _split_loader(self, split: str, train: bool) -> DataLoader:
        inputs, labels = self.arrays(split)
        batch, rank, world = self.process_share()
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        sampler = BatchSampler(
            len(inputs),
            batch,
            train=train,
            seed=seed,
            rank=rank,
            world_size=world,
            step_numbers=self.resident and train,
        )
        if train and len(sampler) == 0:
            raise too_few_samples(split, len(inputs), sampler.global_batch)
        if train and self._resume is not None:
            sampler.resume_at(self._resume["epoch"], self._resume["batches_done"])
        if train:
            self._train_order.sampler = sampler
        dataset = IndexBatches(len(inputs)) if self.resident else ArrayDataset(inputs, labels, self.transform(train))
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

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
