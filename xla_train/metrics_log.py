"""Publishing epoch metrics without putting them on the accelerator.

Lightning's `self.log` turns every value into a tensor on the model's device.
On XLA those tensors become small graphs of their own and, worse, leftovers
that join the next training step's graph and force a recompile. Values here
are host floats: they go to the loggers as they are, and to callback_metrics
as CPU tensors, where ModelCheckpoint and EarlyStopping read them.
"""
from __future__ import annotations

import torch


def publish(trainer, metrics: dict[str, float]) -> None:
    if trainer is None or not metrics:
        return
    trainer.callback_metrics.update({k: torch.tensor(float(v)) for k, v in metrics.items()})
    if trainer.is_global_zero and not trainer.sanity_checking:
        for logger in trainer.loggers:
            logger.log_metrics({**metrics, "epoch": trainer.current_epoch}, step=trainer.global_step)
