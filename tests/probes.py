"""Test-only pieces for real CLI runs, named on the command line (--trainer.callbacks+=probes.NAME,
model.net.class_path=probes.TinyNet, data.class_path=probes.RowsDataModule), and the CLI built without running."""
import json

import lightning.pytorch as pl
from lightning.pytorch.accelerators import XLAAccelerator
import numpy as np
import torch

from xla_train.data.base import ArrayDataModule


class AutocastProbe(pl.Callback):
    """Records, during training forwards, whether autocast is on and what dtype the last layer computes in."""

    def __init__(self, out: str):
        self.out, self.seen = out, []

    def on_fit_start(self, trainer, pl_module):
        last = [m for m in pl_module.net.modules() if isinstance(m, torch.nn.Linear)][-1]
        device = trainer.strategy.root_device.type

        def hook(module, inputs, output):
            if module.training:
                self.seen.append({"autocast": torch.is_autocast_enabled(device), "out": str(output.dtype),
                                  "weight": str(module.weight.dtype)})

        last.register_forward_hook(hook)

    def on_fit_end(self, trainer, pl_module):
        with open(self.out, "w") as f:
            json.dump(self.seen, f)


class TinyNet(torch.nn.Module):
    """A net that compiles in about a second, for real runs whose subject is not the model."""

    arch = "tiny"

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.config = {"num_classes": num_classes}
        self.body = torch.nn.Sequential(torch.nn.BatchNorm2d(3), torch.nn.AvgPool2d(4), torch.nn.Flatten(),
                                        torch.nn.Linear(3 * 8 * 8, num_classes))

    def forward(self, x):
        return self.body(x)


def _as_tensor(x):
    return torch.as_tensor(x)


class RowsDataModule(ArrayDataModule):
    """Inputs that are their own row numbers ([i, i]), so a loaded batch shows which rows it holds."""

    def __init__(self, batch_size: int = 8, train_rows: int = 200, val_rows: int = 150, seed: int | None = None):
        super().__init__(batch_size=batch_size, seed=seed)
        self.rows = {"train": train_rows, "val": val_rows, "test": val_rows}

    def load_arrays(self):
        return {split: (np.repeat(np.arange(n, dtype=np.float32)[:, None], 2, axis=1), np.arange(n) % 10)
                for split, n in self.rows.items()}

    def transform(self, train: bool):
        return _as_tensor


def built_cli(pairs: dict):
    """The Trainer and data module of `python -m xla_train fit key=value ...`, built by the CLI's own path
    (recipe, key checks, XlaTrainCLI.instantiate_trainer), attached as fit attaches them, and not run."""
    import sys

    from xla_train.config.lightning_cli import XlaTrainCLI
    from xla_train.config.recipes import lightning_args

    saved, sys.argv = sys.argv, sys.argv[:1]  # as config/build.py does: the args are given, not read from argv
    try:
        cli = XlaTrainCLI(lightning_args("fit", pairs, [])[1:], run=False)  # fit's config, built and not run
    finally:
        sys.argv = saved
    cli.datamodule.trainer = cli.trainer
    return cli


def rebuilt_trainer(cli):
    """A new Trainer from the same config through XlaTrainCLI.instantiate_trainer, e.g. in a changed environment."""
    cli.trainer = cli.instantiate_trainer()
    cli.datamodule.trainer = cli.trainer
    return cli.trainer


class StopRecord(pl.Callback):
    """Writes {"step", "exception"} to `out` when a fit ends by an exception: which step each host stopped at."""

    def __init__(self, out: str):
        self.out = out

    def on_exception(self, trainer, pl_module, exception):
        with open(self.out, "w") as f:
            json.dump({"step": trainer.global_step, "exception": type(exception).__name__}, f)


class OneCore(XLAAccelerator):  # for tests/mp_host.py; picklable here, for the forked worker
    """Lightning's XLAAccelerator counts TPU chips on the PCI bus without starting the runtime, which the
    worker must start; here it counts the one XLA:CPU device the same way."""

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

    from xla_train.runtime.multiprocess import XLAMultiProcessStrategy

    class MultiProcessOnOneCore(XLAMultiProcessStrategy):
        """Lightning's XLAStrategy.setup_distributed refuses one device, only because torch_xla would call the
        function in-process (pytorch-lightning#17408); tests/mp_host.py takes the multi-process path anyway.
        What setup_distributed does for several devices: rank_zero_only.rank, no process group."""

        def setup_distributed(self) -> None:
            rank_zero_only.rank = self.global_rank

    MultiProcessOnOneCore.__qualname__ = MultiProcessOnOneCore.__name__ = "MultiProcessOnOneCore"
    return MultiProcessOnOneCore


MultiProcessOnOneCore = _one_core_strategy()
