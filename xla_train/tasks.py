"""The LightningModule that wraps any net: loss, exact epoch metrics, optimizer, and what a checkpoint carries.

Metrics are sums kept on the device (loss, correct, count) and read once per
epoch, so a step never waits on the host. Padded evaluation rows carry label -1
and are masked out of both loss and accuracy, so every sample counts once.
A net with one output is a binary classifier (BCE on a logit); more outputs
mean softmax cross-entropy. With lr_scaling=linear the learning rate grows with
the global batch (Goyal et al., 2017): lr is the rate for one device's batch,
and k devices train at k x lr, reached by a linear warm-up from lr.
"""
from __future__ import annotations

import math
from typing import Literal

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from xla_train.checkpoint import inference_block
from xla_train.metrics_log import publish

STAGES = ("train", "val", "test")


def masked_stats(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean loss over real rows, tensor[loss_sum, correct, count]); rows with y < 0 are padding."""
    mask = (y >= 0).to(logits.dtype)
    target = y.clamp(min=0)
    if logits.ndim == 1 or logits.shape[-1] == 1:
        logits = logits.reshape(-1)
        losses = F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype), reduction="none")
        pred = (logits > 0).long()
    else:
        losses = F.cross_entropy(logits, target, reduction="none")
        pred = logits.argmax(-1)
    count = mask.sum()
    loss_sum = (losses * mask).sum()
    correct = ((pred == target).to(logits.dtype) * mask).sum()
    return loss_sum / count.clamp(min=1), torch.stack([loss_sum, correct, count]).float()


def make_optimizer(hp, params, lr: float | None = None) -> torch.optim.Optimizer:
    """The optimizer a Classifier's hyperparameters describe (the benchmarks build the same one)."""
    lr = hp.lr if lr is None else lr
    if hp.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=hp.momentum, weight_decay=hp.weight_decay,
                               nesterov=hp.nesterov and hp.momentum > 0)
    return torch.optim.Adam(params, lr=lr, weight_decay=hp.weight_decay)


class Classifier(pl.LightningModule):
    def __init__(self, net: nn.Module, lr: float = 1e-3, optimizer: Literal["adam", "sgd"] = "adam",
                 momentum: float = 0.9, nesterov: bool = True, weight_decay: float = 0.0,
                 schedule: Literal["constant", "cosine"] = "constant",
                 lr_scaling: Literal["none", "linear"] = "none", warmup_epochs: float = 5.0):
        super().__init__()
        self.save_hyperparameters(ignore=["net"])
        self.net = net
        self._totals: dict[str, torch.Tensor] = {}
        self.epoch_metrics: dict[str, float] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        loss, stats = masked_stats(self.net(x), y)
        if stage not in self._totals:
            # Made on the host and moved, so it enters the graph as data: every step compiles alike.
            self._totals[stage] = torch.zeros(3).to(stats.device)
        self._totals[stage] = self._totals[stage] + stats.detach()
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def _log_epoch(self, stage: str) -> None:
        totals = self._totals.pop(stage, None)
        if totals is None:
            return
        if self.trainer.world_size > 1:  # one process per device: add up the processes' sums
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        loss_sum, correct, count = totals.cpu().tolist()  # the one host read of the epoch
        if count == 0:
            return
        metrics = {f"{stage}_loss": loss_sum / count, f"{stage}_acc": correct / count}
        self.epoch_metrics.update(metrics)
        publish(self._trainer, metrics)

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        if batch_idx + 1 >= self.trainer.num_training_batches:  # train metrics are final before validation
            self._log_epoch("train")

    def running_metrics(self, stage: str) -> dict[str, float]:
        """The epoch so far, read from the device: a host sync, so progress bars call it sparingly."""
        totals = self._totals.get(stage)
        if totals is None:
            return {}
        loss_sum, correct, count = totals.cpu().tolist()
        return {"loss": loss_sum / count, "acc": correct / count} if count else {}

    def on_train_epoch_end(self) -> None:
        self._log_epoch("train")  # only if the epoch ended early

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def configure_optimizers(self):
        hp = self.hparams
        lr, factors = hp.lr, []
        if hp.lr_scaling == "linear":
            k = self.trainer.num_devices * self.trainer.num_nodes  # global batch / per-device batch
            lr = hp.lr * k
            warmup = max(1, round(hp.warmup_epochs * self._steps_per_epoch()))
            factors.append(lambda s: (1 + (k - 1) * min(s, warmup) / warmup) / k)
            if self.trainer.is_global_zero:
                print(f"learning rate {lr:g} = {hp.lr:g} x {k} device(s) (lr_scaling=linear), "
                      f"warm-up from {hp.lr:g} over {warmup} steps", flush=True)
            if self.logger is not None:
                self.logger.log_hyperparams({"lr_resolved": lr, "lr_warmup_steps": warmup})
        opt = make_optimizer(hp, self.parameters(), lr)
        if hp.schedule == "cosine":
            total = max(1, self.trainer.estimated_stepping_batches)
            factors.append(lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
        if factors:
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: math.prod(f(s) for f in factors))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        return opt

    def _steps_per_epoch(self) -> int:
        t = self.trainer
        if t.train_dataloader is None:
            t.fit_loop.setup_data()
        return max(1, math.ceil(t.num_training_batches / t.accumulate_grad_batches))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        info = dm.inference_info() if dm is not None else {}
        checkpoint["xla_train"] = inference_block(self.net, info)
