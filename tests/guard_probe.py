"""Run by test_compile_guard.py in a subprocess: 3 epochs on XLA; with "change", epoch 2 feeds one batch of a
new shape. A tiny net keeps compiles short: the guard does not care what it guards."""

import sys
import warnings

import lightning.pytorch as pl
import torch

from torch import nn

from xla_train.training.progress import KerasProgress
from xla_train.runtime.plan import plan_hardware
from xla_train.training.compile_guard import CompileAccounting
from xla_train.training.module import Classifier


class ShapeShifter:
    """3 batches of 8 per epoch; in the second epoch the middle batch has 16 rows."""

    def __init__(self):
        self.epoch = 0

    def __len__(self):
        return 3

    def __iter__(self):
        g = torch.Generator().manual_seed(self.epoch)
        for i in range(3):
            n = 16 if (self.epoch == 1 and i == 1) else 8
            yield torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
        self.epoch += 1


mode, change, every = sys.argv[1], sys.argv[2] == "change", int(sys.argv[3])


class FakeTTY:
    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, s):
        self.text += s

    def flush(self):
        pass


class TinyNet(nn.Sequential):
    arch, config = "tiny", {}

    def __init__(self):
        super().__init__(nn.Flatten(), nn.Dropout(0.1), nn.Linear(3 * 32 * 32, 10))


tty = FakeTTY()
plan = plan_hardware("xla", 1)
guard = CompileAccounting(mode)  # as the CLI adds it on XLA
loader = ShapeShifter()
trainer = pl.Trainer(
    max_epochs=3,
    callbacks=[guard, KerasProgress(every, stream=tty)],
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    limit_val_batches=0,
    **plan.trainer_kwargs,
)


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        return loader if change else SteadyLoader()


class SteadyLoader(ShapeShifter):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(3):
            yield torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    trainer.fit(Classifier(TinyNet()), datamodule=Data())  # strict's exit code 3: test_compile_guard, real CLI
for w in caught:
    if "after warm-up" in str(w.message):
        print(f"WARNED: {w.message}")
print("per-epoch compiles:", [r["compiles"] for r in guard.per_epoch])
print("host syncs in training steps:", guard.train_transfers)
print("live bar refreshes:", tty.text.count("ETA"))
