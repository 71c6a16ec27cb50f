"""Test-only callbacks that stop a training process from inside, at an exact step.

Loaded by the CLI through `--trainer.callbacks+=killer.KillAt`, so the run under
test is the real command; tests/fixture_cli.py puts this folder on sys.path.
"""

import os
import signal

import lightning.pytorch as pl


class KillAt(pl.Callback):
    """Sends `sig` to its own process when global_step reaches `step` (SIGKILL: no cleanup at all)."""

    def __init__(self, step: int, sig: str = "SIGKILL"):
        self.step, self.sig = step, getattr(signal, sig)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.sig)
