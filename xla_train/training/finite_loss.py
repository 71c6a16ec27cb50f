"""A training loss that is not a number stops the fit at the end of its group of steps, in one line.

The module's on-device sums count the steps whose running loss stayed finite (training/module.py, add_step), so
one read tells whether and where the loss stopped being a number. Reads are host syncs; they are made where the
host reads anyway (an epoch's end, a progress refresh, a checkpoint) and after each program of K steps
(steps_per_execution), never after every step. The check raises before a checkpoint or a validation could take the
state, so last.ckpt stays the last finite one and no such epoch becomes the best.
"""

from __future__ import annotations

import lightning.pytorch as pl
from typing_extensions import override

from xla_train.runtime.grouping import grouping_of


def check_finite(pl_module) -> None:
    check = getattr(pl_module, "check_finite", None)
    if check is not None:
        check()


class FiniteLoss(pl.Callback):
    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        strategy = trainer.strategy
        if grouping_of(strategy).k > 1 and getattr(strategy, "at_execution_end", False):
            check_finite(pl_module)
