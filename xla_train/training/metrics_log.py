"""The leaf every training callback stands on: per-epoch hooks that survive a resume, and metrics kept off the device.

Lightning's `self.log` turns every value into a tensor on the model's device.
On XLA those tensors become small graphs of their own and, worse, leftovers
that join the next training step's graph and force a recompile. Values here
are host floats: they go to the loggers as they are, and to callback_metrics
as CPU tensors, where ModelCheckpoint and EarlyStopping read them.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from typing_extensions import override

from xla_train import compat


def publish(trainer, metrics: dict[str, float]) -> None:
    if trainer is None or not metrics:
        return
    trainer.callback_metrics.update({k: torch.tensor(float(v)) for k, v in metrics.items()})
    if trainer.is_global_zero and not trainer.sanity_checking:
        for logger in trainer.loggers:
            logger.log_metrics({**metrics, "epoch": trainer.current_epoch}, step=trainer.global_step)


def validated_this_epoch(trainer) -> bool:
    """Whether the val_* in callback_metrics are the current epoch's (the module says which epoch they are)."""
    return trainer.lightning_module.validated_epoch == trainer.current_epoch


def epoch_history(metrics_csv) -> tuple[list[dict], dict]:
    """A run's metrics.csv (one logged group per line) -> (one dict per epoch, the test metrics).

    Test metrics are logged after training, at an epoch that never trained, so they are kept apart.
    """
    import csv

    epochs: dict[int, dict] = {}
    test: dict[str, float] = {}
    with open(metrics_csv) as f:
        for row in csv.DictReader(ln for ln in f if not ln.startswith("#")):
            values = {k: float(v) for k, v in row.items() if k not in ("epoch", "step") and v not in ("", None)}
            tested = {k: v for k, v in values.items() if k.startswith("test_")}
            test.update(tested)
            rest = {k: v for k, v in values.items() if k not in tested}
            if rest:
                entry = epochs.setdefault(int(row["epoch"]), {"epoch": int(row["epoch"])})
                entry.update(rest, step=int(row["step"]))
    return [epochs[e] for e in sorted(epochs)], test


class EpochCallback(pl.Callback):
    """A callback with per-epoch clocks or counters, started again in the epoch a run resumes inside.

    Lightning calls on_train_epoch_start once per epoch, and not again when a run
    resumes from a mid-epoch checkpoint (it ran before the interruption, in the
    process that died). Whatever a callback starts there must start again here.
    """

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        if compat.restarted_mid_epoch(trainer):
            self.on_train_epoch_start(trainer, pl_module)
