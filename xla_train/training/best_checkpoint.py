"""Which epoch is the best checkpoint: the highest val_acc, ties broken by the lower val_loss (or, with
monitor=val_loss, the lowest val_loss, ties broken by the higher val_acc), and never an epoch whose loss is not a
number.

Accuracy on a small validation split moves in steps of 1/N and flattens early while the loss still falls; Lightning's
ModelCheckpoint keeps the first epoch that reached the top score, so a run could hand back epoch 1 of 10. Keras's
ModelCheckpoint(monitor=...) picks one metric too; here the other one settles ties.
"""

from __future__ import annotations

import math
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

from xla_train.training.metrics_log import validated_this_epoch

MONITORS = {"val_acc": ("max", "val_loss"), "val_loss": ("min", "val_acc")}  # metric -> (mode, its tie-break)


class BestCheckpoint(ModelCheckpoint):
    def __init__(self, monitor: str = "val_acc", filename: str | None = None) -> None:
        mode, self.tie_break = MONITORS[monitor]
        super().__init__(monitor=monitor, mode=mode, filename=filename)
        self.best_scores: dict[str, float] | None = None  # the best epoch's two metrics
        self.best_epoch: int | None = None  # 0-based, as Lightning counts; the file name and the report add 1
        self.tied_with: list[int] = []  # epochs whose score equalled the best's and lost on the tie-break

    @override
    def format_checkpoint_name(self, metrics: dict, filename=None, ver=None, prefix=None) -> str:
        """The file names its epoch as the run's lines do, counted from 1 (best-epoch=12.ckpt is epoch 12's), where
        Lightning's {epoch} counts from 0."""
        if "epoch" in metrics:
            metrics = {**metrics, "epoch": metrics["epoch"] + 1}
        return super().format_checkpoint_name(metrics, filename, ver, prefix)

    def _scores(self, trainer) -> dict[str, float] | None:
        metrics = trainer.callback_metrics
        if self.monitor not in metrics or self.tie_break not in metrics:
            return None
        return {k: float(metrics[k]) for k in (self.monitor, self.tie_break)}

    def _beats(self, new: dict[str, float], old: dict[str, float]) -> bool:
        sign = 1 if self.mode == "max" else -1
        if new[self.monitor] != old[self.monitor]:
            return sign * (new[self.monitor] - old[self.monitor]) > 0
        return sign * (new[self.tie_break] - old[self.tie_break]) < 0  # the other way: lower loss, higher accuracy

    @override
    def check_monitor_top_k(self, trainer, current=None) -> bool:
        if not validated_this_epoch(trainer):
            return False  # an epoch that never validated holds the last one's scores: neither better nor a tie
        scores = self._scores(trainer)
        if current is None or scores is None or not all(math.isfinite(v) for v in scores.values()):
            return False  # an epoch whose loss (or accuracy) is not a number never becomes the best
        old, epoch = self.best_scores, trainer.current_epoch
        better = trainer.strategy.reduce_boolean_decision(old is None or self._beats(scores, old))
        tie = old is not None and scores[self.monitor] == old[self.monitor]
        if better:
            self.tied_with = [*self.tied_with, self.best_epoch] if tie else []
            self.best_scores, self.best_epoch = scores, epoch
        elif tie:
            self.tied_with.append(epoch)
        return better

    def why(self) -> str | None:
        """The run report's line: which epoch the best checkpoint is, and why."""
        if self.best_scores is None:
            return None
        m, t = self.monitor, self.tie_break
        name = f" ({Path(self.best_model_path).name})" if self.best_model_path else ""
        line = f"best checkpoint: epoch {self.best_epoch + 1}{name}, the "
        line += f"{'highest' if self.mode == 'max' else 'lowest'} {m} ({self.best_scores[m]:.4f})"
        if self.tied_with:
            tied = sorted(e + 1 for e in self.tied_with)
            epochs = f"epoch {tied[0]}" if len(tied) == 1 else f"epochs {', '.join(map(str, tied))}"
            word = "lower" if self.mode == "max" else "higher"
            line += f"; {epochs} tied on {m}, this one has the {word} {t} ({self.best_scores[t]:.4f})"
        return line

    @override
    def state_dict(self) -> dict:
        own = {"best_scores": self.best_scores, "best_epoch": self.best_epoch, "tied_with": self.tied_with}
        return {**super().state_dict(), **own}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict.get("dirpath", self.dirpath) != self.dirpath:
            # Another folder's state: validate and test write eval_K, a resumed fit a new version_N. Its best and
            # top-k belong to that folder; Lightning keeps only the best's path then, as here, and warned about it
            # with two folder paths on every validate and test of a checkpoint.
            self.best_model_path = state_dict["best_model_path"]
            return
        super().load_state_dict(state_dict)
        if self.best_k_models:  # Lightning took the run's best back (same folder): compare with it, as it does
            self.best_scores, self.best_epoch = state_dict.get("best_scores"), state_dict.get("best_epoch")
            self.tied_with = list(state_dict.get("tied_with") or [])
