"""A fit's result in a notebook: the run folder the CLI writes, read back for its checkpoint, history and config.

fit() returns one and evaluate, predict_split and serve take one, and Run.from_folder opens a folder a command-line
run wrote, so a notebook holds the same thing whichever side trained. Reading it needs neither Lightning nor
torch_xla; its history and chart import what they need when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xla_train.errors import ConfigError, UserError


@dataclass
class Run:
    """One fit's run folder: its checkpoints, its metrics and its resolved config."""

    folder: Path
    recipe: str
    best_checkpoint: str | None = None
    last_checkpoint: str | None = None

    @classmethod
    def from_folder(cls, folder) -> Run:
        from xla_train.training.run_folder import RunFolder  # Lightning: imported on first use

        run = RunFolder(Path(folder).resolve())
        if not run.is_run():
            raise ConfigError(
                f"{run.path} is not a run folder: it has no config.yaml; give a folder like runs/cifar10/version_0"
            )
        best = run.best()
        return cls(
            run.path,
            str(_read_yaml(run.config).get("recipe_name") or run.path.parent.name),
            str(best) if best else None,
            str(run.last) if run.last.is_file() else None,
        )

    @property
    def checkpoint(self) -> str:
        """The best checkpoint by validation accuracy, else the newest state."""
        path = self.best_checkpoint or self.last_checkpoint
        if not path:
            raise UserError(f"the run in {self.folder} wrote no checkpoint")
        return path

    @property
    def config(self) -> dict:
        """The resolved config, as saved in the run folder (the same file the CLI writes)."""
        from xla_train.training.run_folder import RunFolder

        return _read_yaml(RunFolder(self.folder).config)

    def _history(self) -> tuple[list[dict], dict]:
        from xla_train.training.metrics_log import epoch_history  # Lightning: imported on first use

        from xla_train.training.run_folder import RunFolder

        path = RunFolder(self.folder).metrics
        if not path.is_file():
            raise UserError(f"{path} does not exist; the metrics history is read from the CSV log (logger=csv)")
        return epoch_history(path)

    @property
    def history(self) -> list[dict]:
        """One dict per epoch: train and validation loss and accuracy, samples/s, compiles."""
        return self._history()[0]

    @property
    def test_metrics(self) -> dict:
        """The held-out test metrics, if the run tested its best checkpoint (test_after_fit=true)."""
        return self._history()[1]

    def history_frame(self):
        """history as a pandas DataFrame indexed by epoch."""
        try:
            import pandas as pd
        except ImportError:
            raise UserError(
                "history_frame() needs pandas (pip install pandas); run.history is the same data as a list of dicts"
            ) from None
        return pd.DataFrame(self.history).set_index("epoch")

    def plot(self):
        """Loss and accuracy by epoch, train and validation: the chart the Keras tutorials draw."""
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        rows = self.history
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        for ax, metric in zip(axes, ("loss", "acc")):
            for split, style in (("train", "o-"), ("val", "s--")):
                points = [(r["epoch"] + 1, r[f"{split}_{metric}"]) for r in rows if f"{split}_{metric}" in r]
                if points:
                    ax.plot(*zip(*points), style, label=split)
            ax.set(xlabel="epoch", ylabel="accuracy" if metric == "acc" else metric)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.legend()
            ax.grid(alpha=0.3)
        fig.suptitle(f"{self.recipe}: {self.folder}")
        fig.tight_layout()
        return fig

    def __repr__(self) -> str:
        return f"Run({str(self.folder)!r}, recipe={self.recipe!r}, checkpoint={self.best_checkpoint or self.last_checkpoint!r})"


def _read_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) or {}
