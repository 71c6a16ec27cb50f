"""Test-only pieces for real CLI runs, named on the command line (--trainer.callbacks+=probes.NAME,
model.net.class_path=probes.TinyNet, data.class_path=probes.RowsDataModule), and the CLI built without running."""

import json
import os
import random
import sys
import time

import lightning.pytorch as pl
import numpy as np
import torch

from xla_train.data.base import BaseDataModule
from xla_train.data.cifar10 import CIFAR10DataModule
from xla_train.data.digits import DigitsDataModule
from xla_train.errors import require_positive
from xla_train.models.lstm import SentimentLSTM
from xla_train.runtime.torch_xla.accelerators import TracingAccelerator
from xla_train.runtime.torch_xla.engine import OneDevice, TorchXlaEngine


class AutocastProbe(pl.Callback):
    """Records, during training forwards, whether autocast is on and what dtype the last layer computes in."""

    def __init__(self, out: str):
        self.out, self.seen = out, []

    def on_fit_start(self, trainer, pl_module):
        last = [m for m in pl_module.net.modules() if isinstance(m, torch.nn.Linear)][-1]
        device = trainer.strategy.root_device.type

        def hook(module, inputs, output):
            if module.training:
                self.seen.append(
                    {
                        "autocast": torch.is_autocast_enabled(device),
                        "out": str(output.dtype),
                        "weight": str(module.weight.dtype),
                    }
                )

        last.register_forward_hook(hook)

    def on_fit_end(self, trainer, pl_module):
        with open(self.out, "w") as f:
            json.dump(self.seen, f)


class LibraryLoads(pl.Callback):
    """Counts the shared libraries opened (ctypes.CDLL) inside each training step, and notes whether Lightning's
    NVML-based CUDA check is set there; as a control, after fit, what one torch.cuda.is_available() opens with
    that check set. Also notes how many times the run trimmed the C heap (training/host_memory.py)."""

    def __init__(self, out: str):
        self.out, self.steps, self._opened = out, [], [0]

    def on_train_start(self, trainer, pl_module):
        import ctypes

        opened, init = self._opened, ctypes.CDLL.__init__

        def counting(cdll, *args, **kwargs):
            opened[0] += 1
            return init(cdll, *args, **kwargs)

        self._init, ctypes.CDLL.__init__ = init, counting

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._before = self._opened[0]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps.append(
            {"opened": self._opened[0] - self._before, "nvml_check": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")}
        )

    def on_fit_end(self, trainer, pl_module):
        import ctypes

        before, previous = self._opened[0], os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        torch.cuda.is_available()
        control = self._opened[0] - before
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK")
        if previous is not None:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = previous
        ctypes.CDLL.__init__ = self._init
        trims = [c.trims for c in trainer.callbacks if type(c).__name__ == "HostHeapTrim"]
        with open(self.out, "w") as f:
            json.dump({"steps": self.steps, "control": control, "heap_trims": trims}, f)


class TinyNet(torch.nn.Module):
    """A net that compiles in about a second, for real runs whose subject is not the model: a user's net, with no
    attribute xla_train would read."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.0):
        super().__init__()
        require_positive("model.net.", num_classes=num_classes)
        self.body = torch.nn.Sequential(
            torch.nn.BatchNorm2d(3),
            torch.nn.AvgPool2d(4),
            torch.nn.Flatten(),
            *([torch.nn.Dropout(dropout)] if dropout else []),
            torch.nn.Linear(3 * 8 * 8, num_classes),
        )

    def forward(self, x):
        return self.body(x)


class DropoutNet(torch.nn.Module):
    """Rows to one logit through nn.Dropout, with nothing that reads the batch's statistics: on one row repeated, a
    step's loss moves with its dropout masks alone, whatever order the rows come in."""

    def __init__(self, features: int = 16, p: float = 0.5):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(features, 64), torch.nn.Tanh(), torch.nn.Dropout(p), torch.nn.Linear(64, 1)
        )
        g = torch.Generator().manual_seed(0)  # the same weights whatever the run's seed: only the masks follow it
        with torch.no_grad():
            for w in self.parameters():
                w.copy_(torch.rand(w.shape, generator=g) - 0.5)

    def forward(self, x):
        return self.body(x)


def _as_tensor(x):
    return torch.as_tensor(x)


class RowsDataModule(BaseDataModule):
    """Inputs that are their own row numbers ([i, i]), so a loaded batch shows which rows it holds."""

    def __init__(self, batch_size: int = 8, train_rows: int = 200, val_rows: int = 150, seed: int | None = None):
        super().__init__(batch_size=batch_size, seed=seed)
        self.rows = {"train": train_rows, "val": val_rows, "test": val_rows}

    def load_arrays(self):
        return {
            split: (np.repeat(np.arange(n, dtype=np.float32)[:, None], 2, axis=1), np.arange(n) % 10)
            for split, n in self.rows.items()
        }

    def transform(self, train: bool):
        return _as_tensor


def built_cli(pairs: dict):
    """The Trainer and data module of `python -m xla_train fit key=value ...`, built by the CLI's own path
    (recipe, key checks, XlaTrainCLI.instantiate_trainer), attached as fit attaches them, and not run."""

    from xla_train.config.lightning_cli import XlaTrainCLI
    from xla_train.config.run_spec import RunSpec

    saved, sys.argv = sys.argv, sys.argv[:1]  # as config/build.py does: the args are given, not read from argv
    try:
        cli = XlaTrainCLI(RunSpec.parse("fit", pairs), run=False)  # fit's config, built and not run
    finally:
        sys.argv = saved
    cli.datamodule.trainer = cli.trainer
    return cli


def rebuilt_trainer(cli):
    """A new Trainer from the same config through XlaTrainCLI.instantiate_trainer, e.g. in a changed environment."""
    cli.trainer = cli.instantiate_trainer()
    cli.datamodule.trainer = cli.trainer
    return cli.trainer


class _ChangedBatches:
    """Iterates a loader, each batch as `change(epoch, index, batch)` makes it."""

    def __init__(self, loader, trainer):
        self.loader, self.trainer = loader, trainer

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            yield self.change(self.trainer.current_epoch, i, batch)


class _SecondEpochShift(_ChangedBatches):
    """In the second epoch the second batch keeps only half its rows."""

    @staticmethod
    def change(epoch, i, batch):
        return tuple(t[: len(t) // 2] for t in batch) if epoch == 1 and i == 1 else batch


class _LabelsMovedOn(_ChangedBatches):
    """From the second epoch on, each label is the next class's."""

    @staticmethod
    def change(epoch, i, batch):
        x, y = batch
        return (x, (y + 1) % 10) if epoch >= 1 else (x, y)


class ForgettingDigits(DigitsDataModule):
    """The quickstart's digits, whose training labels move one class on after the first epoch: the net learns the
    digits and then unlearns them, so its best epoch is the first, whatever the machine's rounding. Streamed
    (on_device=false): the labels are the loader's."""

    def train_dataloader(self):
        return _LabelsMovedOn(super().train_dataloader(), self.trainer)


class _BreaksAtBatch:
    """Iterates a loader and raises at its third batch, as a broken augmentation or a bad file would."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            if i == 2:
                raise ValueError("the loader broke at batch 2")
            yield batch


class BreakingDigits(DigitsDataModule):
    """The quickstart's digits, with a training loader that raises mid-epoch."""

    def train_dataloader(self):
        return _BreaksAtBatch(super().train_dataloader())


class ShapeShiftingDigits(DigitsDataModule):
    """The quickstart's digits, but one training batch of epoch 2 has a new shape: a real recompile after
    warm-up, which xla_guard=strict must turn into exit code 3 through the CLI."""

    def train_dataloader(self):
        return _SecondEpochShift(super().train_dataloader(), self.trainer)


class _GlobalRngJitter:
    """Brightens each image by np.random's draw and mirrors the batch on random.random()'s: augmentation
    written with the global numpy and Python RNGs, as user code often is."""

    def __init__(self, base):
        self.base = base

    def __call__(self, images):
        shift = np.random.randint(0, 40, size=(len(images), 1, 1, 1))
        images = np.clip(images.astype(np.int16) + shift, 0, 255).astype(np.uint8)
        if random.random() < 0.5:
            images = np.ascontiguousarray(images[:, :, ::-1])
        return self.base(images)


class GlobalRngCifar(CIFAR10DataModule):
    """CIFAR-10 whose training batches draw from numpy's and Python's global RNGs (test_resume: RngState)."""

    def transform(self, train: bool):
        base = super().transform(train)
        return _GlobalRngJitter(base) if train else base


class StopRecord(pl.Callback):
    """Writes {"step", "exception"} to `out` when a fit ends by an exception: which step each host stopped at."""

    def __init__(self, out: str):
        self.out = out

    def on_exception(self, trainer, pl_module, exception):
        with open(self.out, "w") as f:
            json.dump({"step": trainer.global_step, "exception": type(exception).__name__}, f)


class TestCompiles(pl.Callback):
    """Writes {"validations", "test_compiles"} to `out` after the test: how many validation loops ran, and the
    graphs XLA compiled while the test ran (the runtime's own counter, through its Backend)."""

    def __init__(self, out: str):
        self.out, self.validations = out, 0

    @staticmethod
    def _compiles(trainer) -> int:
        from xla_train.runtime.registry import backend_of_strategy

        return backend_of_strategy(trainer.strategy).counters()[0]

    def on_validation_end(self, trainer, pl_module):
        self.validations += 1

    def on_test_start(self, trainer, pl_module):
        self._start = self._compiles(trainer)

    def on_test_end(self, trainer, pl_module):
        with open(self.out, "w") as f:
            json.dump({"validations": self.validations, "test_compiles": self._compiles(trainer) - self._start}, f)


def swaps_in_fit(model, device) -> tuple[list[bool], list[str]]:
    """Which layers of `model` the torch_xla engine swaps while it is on `device`, and their class names after it
    gives the model back (the strategy's Lightning moves beneath it: to the device, and back to the CPU)."""
    own = [type(m) for m in model]
    engine = TorchXlaEngine(OneDevice(device))
    engine.place_model(model, lambda: model.to(device))
    swapped = [type(m) is not t for m, t in zip(model, own)]
    model.to("cpu")
    engine.restore_model(model)
    return swapped, [type(m).__name__ for m in model]


class OneCore(TracingAccelerator):  # for tests/mp_host.py; picklable here, for the forked worker
    """strategy=xla_mp's accelerator (Lightning's XLAAccelerator underneath) counts TPU chips on the PCI bus
    without starting the runtime, which the worker must start; here it counts the one XLA:CPU device."""

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def parse_devices(devices):
        return 1

    @staticmethod
    def get_parallel_devices(devices):
        return [torch.device("xla", 0)]


def _one_core_strategy():
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from xla_train.runtime.torch_xla.multiprocess import XLAMultiProcessStrategy

    class MultiProcessOnOneCore(XLAMultiProcessStrategy):
        """Lightning's XLAStrategy.setup_distributed refuses one device, only because torch_xla would call the
        function in-process (pytorch-lightning#17408); tests/mp_host.py takes the multi-process path anyway.
        What setup_distributed does for several devices: rank_zero_only.rank, no process group."""

        def setup_distributed(self) -> None:
            rank_zero_only.rank = self.global_rank

    MultiProcessOnOneCore.__qualname__ = MultiProcessOnOneCore.__name__ = "MultiProcessOnOneCore"
    return MultiProcessOnOneCore


MultiProcessOnOneCore = _one_core_strategy()


class ShardingProbe(pl.Callback):
    """Under SPMD, after training: each state tensor's sharding (parameters, buffers, optimizer state) as torch_xla
    reports it, the first training batch's, and the epoch order's that a resident batch reads; writes
    shardings.json into the run folder."""

    def __init__(self):
        self.batch = self.rows = None

    @staticmethod
    def _kind(t) -> str:
        import torch_xla
        from torch_xla.distributed.spmd import ShardingType

        kind = torch_xla._XLAC._get_xla_sharding_type(t)
        return "none" if kind is None else ShardingType(kind).name

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.batch is None:
            self.batch = [self._kind(t) for t in batch]
            self.rows = [self._kind(t) for t in pl_module.execution_inputs()]  # resident: the epoch's order

    def on_train_end(self, trainer, pl_module):
        state = {f"param {n}": self._kind(p) for n, p in pl_module.named_parameters()}
        state.update({f"buffer {n}": self._kind(b) for n, b in pl_module.named_buffers() if b.device.type == "xla"})
        optimizer = trainer.optimizers[0]
        for i, p in enumerate(optimizer.param_groups[0]["params"]):
            state.update(
                {
                    f"opt {i} {k}": self._kind(v)
                    for k, v in optimizer.state[p].items()
                    if isinstance(v, torch.Tensor) and v.device.type == "xla"
                }
            )
        with open(os.path.join(trainer.log_dir, "shardings.json"), "w") as f:
            json.dump({"state": state, "batch": self.batch, "rows": self.rows}, f)


class NetCalls(pl.Callback):
    """How many times the net's forward ran inside training batches (a trace runs it; an execution of a program
    traced before does not); writes net_calls.json into the run folder."""

    def __init__(self):
        self.calls, self.training, self._hook = 0, False, None

    def _count(self, module, args):
        self.calls += self.training

    def on_train_start(self, trainer, pl_module):
        self._hook = pl_module.net.register_forward_pre_hook(self._count)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.training = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.training = False

    def on_train_end(self, trainer, pl_module):
        self._hook.remove()
        with open(os.path.join(trainer.log_dir, "net_calls.json"), "w") as f:
            json.dump({"train": self.calls}, f)


class RngDraws(pl.Callback):
    """Before each training step, one draw from each RNG user code draws from (torch's, numpy's and Python's
    global RNGs) and the device's own RNG state (None where the device has none apart from torch's), appended as a
    JSON line to rng_draws.jsonl in the working folder: a resumed run's lines must be the uninterrupted run's."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        from xla_train.runtime.registry import backend_of

        device = trainer.strategy.root_device
        draws = {
            "step": trainer.global_step,
            "torch": torch.rand(1).item(),
            "numpy": float(np.random.random()),
            "python": random.random(),
            "device": backend_of(device).rng_state(device),
        }
        with open("rng_draws.jsonl", "a") as f:
            f.write(json.dumps(draws) + "\n")


class IdleLSTM(SentimentLSTM):
    """The LSTM, whose forward first waits idle for `idle_ms` on the host: on XLA a step's forward is the host's
    trace, so each step's host share holds that wait, and the host's CPU time does not."""

    def __init__(self, vocab_size: int = 64, embed_dim: int = 8, hidden_size: int = 8, idle_ms: float = 0.0):
        super().__init__(vocab_size=vocab_size, embed_dim=embed_dim, hidden_size=hidden_size)
        self.idle_ms = idle_ms

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        time.sleep(self.idle_ms / 1e3)
        return super().forward(ids)


class LossRecord(pl.Callback):
    """Writes to `out` what a user's callback reads as outputs["loss"] at each training step: its value, or null
    where the tensor holds no element."""

    def __init__(self, out: str):
        self.out, self.losses = out, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"]
        self.losses.append(float(loss) if loss.numel() else None)

    def on_fit_end(self, trainer, pl_module):
        with open(self.out, "w") as f:
            json.dump(self.losses, f)
