"""Where a command's logs go: each fit a version_N claimed with an exclusive mkdir, each evaluation an eval_K beside its run.

Lightning's loggers pick `version_N` by listing the folder and adding 1, so two fits started together could share
one; here the folder is made without exist_ok and a collision takes the next N. The claim comes when the folder is
first asked for (its config is saved), after every input check, so a refused command writes nothing. validate and
test measure a checkpoint, so they write an eval_K in its run, or in RUNS/NAME when there is none or it is not
writable (docs/serving.md, "Runs, checkpoints and CPU inference").
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from xla_train.errors import ConfigError
from xla_train.training.run_folder import RUN_PREFIX, RunFolder, claim_folder

EVAL_PREFIX = "eval_"


class _ClaimedVersion:
    """A logger whose version folder is claimed by claim_folder on the first process (global rank 0), which
    is the only one that writes; the others' trainer.log_dir is a broadcast of the first's."""

    def __init__(self, *args, prefix: str = RUN_PREFIX, **kwargs):
        super().__init__(*args, **kwargs)
        self._folder_prefix, self._claimed = prefix, None

    @property
    def version(self):
        if self._claimed is None:
            if rank_zero_only.rank != 0:
                return super().version
            name = claim_folder(self.root_dir, self._folder_prefix).name
            # an int keeps Lightning's own "version_N" naming; a string is used as the folder's name
            self._claimed = int(name[len(RUN_PREFIX) :]) if self._folder_prefix == RUN_PREFIX else name
        return self._claimed

    def adopt_version(self, version) -> None:
        """The version another process claimed for this run (strategy=xla_mp's worker): the parent's next stage,
        a test after fit, writes to that folder instead of claiming one more."""
        self._claimed = version


class RunCSVLogger(_ClaimedVersion, CSVLogger):
    pass


class RunTensorBoardLogger(_ClaimedVersion, TensorBoardLogger):
    pass


def require_tensorboard() -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        try:
            import tensorboardX  # noqa: F401  (Lightning's fallback writer)
        except ImportError:
            raise ConfigError(
                "logger=tensorboard needs the tensorboard package: pip install 'xla_train[tensorboard]' "
                "(or pip install tensorboard), or use logger=csv"
            ) from None


def eval_parent(runs_dir: str, name: str, ckpt_path: str | None) -> Path:
    """The run folder a checkpoint was written in (RUNS/NAME/version_N/checkpoints/FILE.ckpt) if this user may
    write there, else RUNS/NAME."""
    run = RunFolder.of_checkpoint(ckpt_path) if ckpt_path else None
    if run is not None and os.access(run.path, os.W_OK | os.X_OK):  # someone else's, read-only: under runs_dir
        return run.path
    return Path(runs_dir) / name


def run_logger(kind: str, runs_dir: str, name: str, command: str | None, ckpt_path: str | None = None):
    """The logger of a fit (a new version_N) or of a validate/test (a new eval_K beside the checkpoint's run)."""
    cls = RunTensorBoardLogger if kind == "tensorboard" else RunCSVLogger
    if kind == "tensorboard":
        require_tensorboard()
    if command in ("validate", "test"):
        return cls(str(eval_parent(runs_dir, name, ckpt_path)), name="", prefix=EVAL_PREFIX)
    return cls(runs_dir, name=name)
