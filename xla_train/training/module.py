"""The LightningModule that wraps any net: exact epoch metrics, the optimizer, and what a checkpoint carries.

Loss, learning-rate factors and optimizer are objective.py's, shared with serving and the benchmarks' loop. Metrics
are sums kept on the device (loss, correct, count), read once per epoch, so a step never waits on the host; padded
evaluation rows (label -1) are masked out. A batch becomes the net's input inside the step, on the device
(data/batching.py). With lr_scaling=linear, lr is the rate for one device's batch: k devices train at k x lr.
"""

from __future__ import annotations

import math
from typing import Literal

import lightning.pytorch as pl
import torch
from torch import nn
from typing_extensions import override

from xla_train import compat
from xla_train.data.base import keep
from xla_train.data.batching import BatchInputs, StreamedInputs
from xla_train.errors import ConfigError, TrainingDiverged
from xla_train.models.reference import NetRef
from xla_train.objective import cosine_decay, linear_warmup, lr_scheduler, make_optimizer, masked_stats
from xla_train.training.metrics_log import publish


SUMS = 4  # a stage's on-device sums: loss, correct, count, and steps whose running loss sum was still finite


def add_step(sums: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    """sums + a step's [loss_sum, correct, count], and one more finite step while the loss sum stays finite: NaN
    and inf never leave a sum they entered, so the fourth sum is the epoch's first non-finite step, read with the
    rest and no host sync of its own."""
    head = sums[:3] + stats
    return torch.cat([head, sums[3:] + torch.isfinite(head[:1]).to(sums.dtype)])


class Classifier(pl.LightningModule):
    def __init__(
        self,
        net: nn.Module | None = None,
        lr: float = 1e-3,
        optimizer: Literal["adam", "sgd"] = "adam",
        momentum: float = 0.9,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        schedule: Literal["constant", "cosine"] = "constant",
        lr_scaling: Literal["none", "linear"] = "none",
        warmup_epochs: float = 5.0,
    ):
        super().__init__()
        for name, value, low in (
            ("lr", lr, 0.0),
            ("momentum", momentum, None),
            ("weight_decay", weight_decay, None),
            ("warmup_epochs", warmup_epochs, None),
        ):
            if not (value > low if low is not None else value >= 0):  # NaN fails both
                raise ConfigError(f"model.{name}={value} must be {'positive' if low is not None else '0 or more'}")
        if net is None:  # a saved config whose net fit got as an instance from Python
            raise ConfigError(
                "model.net is not set (a run whose net was given to fit as an instance saves model.net: null); "
                "name its class: net=package.module.Class (in Python, net= the class or an instance)"
            )
        self.save_hyperparameters(ignore=["net"])
        self.net = net
        self.net_ref: NetRef | None = None  # what built the net, where it was built from a class path (config/)
        self.batch_inputs: BatchInputs = StreamedInputs(keep)  # the data module's, once a Trainer sets up
        self._totals: dict[str, torch.Tensor] = {}
        self.epoch_metrics: dict[str, float] = {}
        # The epoch the val_* in callback_metrics belong to: max_steps may end an epoch before it validates, and then
        # they are the last validated epoch's, which no callback should show or compare as this epoch's.
        self.validated_epoch: int | None = None

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    @override
    def setup(self, stage: str) -> None:
        dm = self.trainer.datamodule
        if dm is not None and hasattr(dm, "batch_inputs"):
            self.batch_inputs = dm.batch_inputs()  # the batch as loaded -> the net's input, inside the step
            # Rows the device keeps between steps (the epoch's order) are placed as the strategy places a batch.
            self.batch_inputs.place_rows = getattr(self.trainer.strategy, "rows_to_device", None)

    def _step(self, batch, stage: str) -> torch.Tensor:
        x, y = self.batch_inputs(batch, stage, train=stage == "train")
        loss, stats = masked_stats(self.net(x), y)
        if stage not in self._totals:
            # Made on the host and moved, so it enters the graph as data: every step compiles alike.
            self._totals[stage] = torch.zeros(SUMS).to(stats.device)
        self._totals[stage] = add_step(self._totals[stage], stats.detach())
        return loss

    @override
    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    @override
    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    @override
    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def _log_epoch(self, stage: str) -> None:
        totals = self._totals.pop(stage, None)
        if totals is None:
            return
        if self.trainer.world_size > 1:  # one process per device: add up the processes' sums
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        loss_sum, correct, count, finite_steps = totals.cpu().tolist()  # the one host read of the epoch
        if stage == "train":
            self._stop_if_not_finite(loss_sum, finite_steps)
        if count == 0:
            return
        metrics = {f"{stage}_loss": loss_sum / count, f"{stage}_acc": correct / count}
        self.epoch_metrics.update(metrics)
        publish(self._attached_trainer(), metrics)

    @override
    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        t = self.trainer  # train metrics are final before validation, or at the step that max_steps ends the fit
        if batch_idx + 1 >= t.num_training_batches or 0 < t.max_steps <= t.global_step:
            self._log_epoch("train")

    def step_state(self, stage: str = "train") -> dict[str, torch.Tensor]:
        """The on-device sums a step of `stage` adds to, made if the epoch has none yet. A runtime that runs steps
        as programs of its own (steps_per_execution, the JAX engine) carries them through them."""
        if stage not in self._totals:
            self._totals[stage] = torch.zeros(SUMS).to(self.device)
        return {stage: self._totals[stage]}

    def load_step_state(self, state: dict[str, torch.Tensor]) -> None:
        self._totals.update(state)

    def execution_inputs(self) -> list[torch.Tensor]:
        """Device tensors a training step reads that change per epoch, not per step (data/batching.py): a runtime
        that runs several steps as one program passes them to it once per execution."""
        return self.batch_inputs.execution_inputs(self.device)

    def program_inputs(self, train: bool):
        """What a step reads besides its batch, as host arrays (data/batching.py, program_inputs): a runtime whose
        programs take every input explicitly passes them in, and traces the step inside `reading` them."""
        return self.batch_inputs.program_inputs(train)

    def reading(self, tensors: dict[str, torch.Tensor]):
        return self.batch_inputs.reading(tensors)

    def running_metrics(self, stage: str) -> dict[str, float]:
        """The epoch so far, read from the device: a host sync, so progress bars call it sparingly."""
        totals = self._totals.get(stage)
        if totals is None:
            return {}
        loss_sum, correct, count, finite_steps = totals.cpu().tolist()
        trainer = self._attached_trainer()
        if stage == "train" and (trainer is None or trainer.world_size == 1):  # one host reads: no other to agree
            self._stop_if_not_finite(loss_sum, finite_steps)
        return {"loss": loss_sum / count, "acc": correct / count} if count else {}

    def check_finite(self) -> None:
        """Stop the fit in one line if a training loss of this epoch was not a number: a host read, so it is made
        where the host reads anyway (an epoch's end, a progress refresh, a checkpoint, a group of K steps). Every
        process calls it at the same step, and with several the sums are added first, so all stop together."""
        totals = self._totals.get("train")
        if totals is None:
            return
        trainer = self._attached_trainer()
        loss_sum, _, _, finite_steps = totals.cpu().tolist()  # the tensor as it is: no new graph to compile
        if trainer is not None and trainer.world_size > 1:
            loss_sum = trainer.strategy.reduce(totals, reduce_op="sum").cpu().tolist()[0]
        self._stop_if_not_finite(loss_sum, finite_steps)

    def _stop_if_not_finite(self, loss_sum: float, finite_steps: float) -> None:
        if math.isfinite(loss_sum):
            return
        trainer, lr = self._attached_trainer(), self.hparams.lr
        epoch = trainer.current_epoch + 1 if trainer is not None else "?"
        after = f" after step {trainer.global_step}" if trainer is not None else ""
        from xla_train.training.resume import LastCheckpoint

        saved = [c.path for c in getattr(trainer, "callbacks", []) if isinstance(c, LastCheckpoint) and c.path]
        kept = f"{saved[0]} holds the last finite state" if saved else "no checkpoint was written before it"
        raise TrainingDiverged(
            f"the training loss was not a number at epoch {epoch}, step {int(finite_steps) + 1} of the epoch; the fit "
            f"stopped{after} and {kept}; try a lower learning rate than lr={lr:g} (e.g. lr={lr / 10:g}), or look "
            f"for inputs or labels out of range"
        )

    @override
    def on_train_epoch_end(self) -> None:
        self._log_epoch("train")  # only if the epoch ended early

    @override
    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.validated_epoch = self.trainer.current_epoch
        self._log_epoch("val")

    @override
    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    @override
    def configure_optimizers(self):
        hp = self.hparams
        lr, factors = hp.lr, []
        if hp.lr_scaling == "linear":
            k = self.trainer.num_devices * self.trainer.num_nodes  # global batch / per-device batch
            lr = hp.lr * k
            warmup = max(1, round(hp.warmup_epochs * self._steps_per_epoch()))
            factors.append(linear_warmup(k, warmup))
            if self.trainer.is_global_zero:
                print(
                    f"learning rate {lr:g} = {hp.lr:g} x {k} device(s) (lr_scaling=linear), "
                    f"warm-up from {hp.lr:g} over {warmup} steps",
                    flush=True,
                )
            if self.logger is not None:
                self.logger.log_hyperparams({"lr_resolved": lr, "lr_warmup_steps": warmup})
        opt = make_optimizer(hp, self.parameters(), lr)
        if hp.schedule == "cosine":
            factors.append(cosine_decay(max(1, self.trainer.estimated_stepping_batches)))
        sched = lr_scheduler(opt, factors)
        if sched is not None:
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        return opt

    def _steps_per_epoch(self) -> int:
        t = self.trainer
        compat.setup_train_data(t)
        return max(1, math.ceil(t.num_training_batches / t.accumulate_grad_batches))

    def _attached_trainer(self):
        """The Trainer, or None when the module runs without one (LightningModule.trainer raises then)."""
        try:
            return self.trainer
        except RuntimeError:
            return None

    def net_reference(self) -> NetRef:
        """How the checkpoint names the net: its class and the init arguments it was built with, where known."""
        return self.net_ref or NetRef.of(type(self.net))

    @override
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        trainer = self._attached_trainer()
        dm = getattr(trainer, "datamodule", None) if trainer is not None else None
        info = dm.inference_info() if dm is not None else {}
        checkpoint["xla_train"] = {**self.net_reference().block(), **info}
