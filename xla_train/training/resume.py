"""Surviving preemption: random-number state in every checkpoint, and a clean stop on SIGTERM or SIGINT.

Preemptible TPU VMs get SIGTERM before they go. Lightning notices it after the
current training step; this module then writes `last.ckpt` (atomically, like
every checkpoint) and the CLI exits with PREEMPTED_EXIT_CODE. Ctrl-C is made to
behave the same way instead of interrupting a step halfway. With the RNG
states (host and device) and the data module's position in the data order in
the checkpoint, `ckpt=last` continues exactly where the run stopped.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from xla_train import compat
from xla_train.runtime.registry import backend_of_strategy
from xla_train.training.finite_loss import check_finite
from xla_train.training.run_folder import RunFolder

PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL: try again later (with ckpt=last)


def _numpy_state() -> dict:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "name": name,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "gauss": float(gauss),
    }


def _set_numpy_state(s: dict) -> None:
    np.random.set_state((s["name"], s["keys"].numpy().astype(np.uint32), s["pos"], s["has_gauss"], s["gauss"]))


class RngState(pl.Callback):
    """Saves and restores torch, numpy, Python and device RNG states (plain types: weights_only-safe)."""

    def __init__(self) -> None:
        self._backend = self._device = None
        self._pending: dict | None = None

    @override
    def setup(self, trainer, pl_module, stage: str) -> None:
        self._device = trainer.strategy.root_device
        self._backend = backend_of_strategy(trainer.strategy)

    @override
    def state_dict(self) -> dict:
        return {
            "torch": torch.get_rng_state(),
            "numpy": _numpy_state(),
            "python": list(random.getstate()),
            "device": self._backend.rng_state(self._device) if self._backend is not None else None,
        }

    @override
    def load_state_dict(self, state: dict) -> None:
        self._pending = state

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        s, self._pending = self._pending, None
        if not s:
            return
        torch.set_rng_state(s["torch"])
        _set_numpy_state(s["numpy"])
        version, internal, gauss = s["python"]
        random.setstate((version, tuple(internal), gauss))
        self._backend.set_rng_state(self._device, s["device"])


def checkpoint_dir(trainer) -> str:
    ckpt = trainer.checkpoint_callback
    return getattr(ckpt, "dirpath", None) or str(RunFolder(trainer.log_dir or ".").checkpoints)


class LastCheckpoint(pl.Callback):
    """Writes last.ckpt at every epoch end, and every `every_n_steps` steps if asked.

    Lightning's ModelCheckpoint(save_last=True) rewrites last.ckpt only when it
    also saves a top-k checkpoint, so after an epoch that did not improve the
    monitored metric, "last" would be an older epoch; resuming needs the newest.
    """

    def __init__(self, every_n_steps: int = 0) -> None:
        self.every_n_steps = every_n_steps
        self.path: str | None = None

    def _save(self, trainer) -> None:
        check_finite(trainer.lightning_module)  # a loss that is not a number stops here: last.ckpt stays finite
        path = os.path.join(checkpoint_dir(trainer), RunFolder.LAST)
        trainer.save_checkpoint(path, weights_only=False)  # the full state, to resume from
        self.path = path

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self._save(trainer)

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._save(trainer)


class Preemption(pl.Callback):
    """On SIGTERM or SIGINT: finish the step, write last.ckpt, and let the CLI exit with a distinct code.

    On a pod slice the signal reaches the hosts at different steps, and every host
    must stop after the same one (runtime/torch_xla/spmd.py, `agree_to_stop`). There the
    signals only note the request; after each execution (a training step, or K of
    them with steps_per_execution=K) the hosts agree, and only then is Lightning
    told to stop, on every host at once.
    """

    def __init__(self) -> None:
        self.saved_to: str | None = None
        self._old: dict[int, object] = {}
        self._agree = None
        self._requested = False

    @override
    def on_fit_start(self, trainer, pl_module) -> None:
        agree = getattr(trainer.strategy, "agree_to_stop", None)
        self._agree = agree if trainer.world_size > 1 else None
        self._requested = False
        if self._agree is None:
            self._handle(signal.SIGINT, lambda signum, frame: compat.request_stop_after_step(trainer))

    def _note_request(self, signum, frame) -> None:
        self._requested = True

    def _take_over_signals(self) -> None:
        """After Lightning has installed its SIGTERM handler (just before the sanity check and training)."""
        if self._agree is not None and signal.SIGTERM not in self._old:
            self._handle(signal.SIGTERM, self._note_request)
            self._handle(signal.SIGINT, self._note_request)

    @override
    def on_sanity_check_start(self, trainer, pl_module) -> None:
        self._take_over_signals()

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        self._take_over_signals()

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # with steps_per_execution=K, once per execution: every host has then run the same steps
        if (
            self._agree is not None
            and getattr(trainer.strategy, "at_execution_end", True)
            and self._agree(self._requested)
        ):
            compat.request_stop_after_step(trainer)

    @override
    def on_fit_end(self, trainer, pl_module) -> None:
        self._restore()

    @override
    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore()
        if not isinstance(exception, SIGTERMException):
            return
        path = os.path.join(checkpoint_dir(trainer), RunFolder.LAST)
        trainer.save_checkpoint(path, weights_only=False)  # on a pod: every host, host 0 writes
        self.saved_to = path
        if trainer.is_global_zero:
            print(
                f"xla_train: stopped by signal after step {trainer.global_step}; saved {path}. "
                f"Resume with ckpt=last (or ckpt={path})",
                file=sys.stderr,
                flush=True,
            )
        elif self._agree is not None:
            print(
                f"xla_train: host {trainer.global_rank} stopped with the others after step "
                f"{trainer.global_step}; host 0 saved the checkpoint",
                file=sys.stderr,
                flush=True,
            )

    def _handle(self, signum: int, handler) -> None:
        # Only a main thread may set handlers; xla_mp's workers run the fit in a thread (torch_xla's
        # _run_thread_per_device), as Lightning's own signal connector allows for.
        if os.name == "posix" and threading.current_thread() is threading.main_thread():
            self._old.setdefault(signum, signal.signal(signum, handler))

    def _restore(self) -> None:
        for signum, old in self._old.items():
            if old is not None:  # None: a handler not installed from Python, which cannot be put back
                signal.signal(signum, old)
        self._old = {}
