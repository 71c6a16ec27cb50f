"""A run's folder: where it is claimed, and where its config, checkpoints and metrics lie in it.

Lightning-free, so that the benchmarks, the Python API and serving's callers can
find a run's files without importing Lightning. Listing `version_*` and adding 1
lets two processes started together pick the same N: the folder is created
without exist_ok, so of two processes that try the same N, one gets
FileExistsError and takes the next.
"""

from __future__ import annotations

from pathlib import Path

from xla_train.errors import ConfigError

RUN_PREFIX = "version_"


def claim_folder(root: str | Path, prefix: str = RUN_PREFIX) -> Path:
    """root/prefixN with N one more than any there, created here: two processes never get the same one."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        taken = (p.name[len(prefix) :] for p in root.glob(f"{prefix}*"))
        n = 1 + max((int(t) for t in taken if t.isdigit()), default=-1)
        while True:
            try:
                (root / f"{prefix}{n}").mkdir()
                return root / f"{prefix}{n}"
            except FileExistsError:
                n += 1
    except PermissionError:
        raise ConfigError(
            f"cannot create a run folder in {root}: permission denied; give runs_dir=A_FOLDER you can write"
        ) from None


class RunFolder:
    """One training run's folder, RUNS/NAME/version_N: config.yaml, checkpoints/ (best-*.ckpt, last.ckpt) and
    metrics.csv. The one place that knows that layout."""

    CONFIG, CHECKPOINTS, LAST, BEST_GLOB, METRICS = (
        "config.yaml",
        "checkpoints",
        "last.ckpt",
        "best-*.ckpt",
        "metrics.csv",
    )
    BEST_NAME = "best-{epoch}"  # ModelCheckpoint's filename pattern for the best checkpoint

    def __init__(self, path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def last(self) -> Path:
        return self.checkpoints / self.LAST

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    def is_run(self) -> bool:
        return self.config.is_file()

    def best(self) -> Path | None:
        """The newest best-*.ckpt, if any."""
        found = sorted(self.checkpoints.glob(self.BEST_GLOB), key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None

    def checkpoint(self) -> Path | None:
        """The best checkpoint by validation accuracy, else the newest state, else None."""
        return self.best() or (self.last if self.last.is_file() else None)

    @classmethod
    def claim(cls, root, prefix: str = RUN_PREFIX) -> RunFolder:
        """A new root/prefixN of its own (claim_folder)."""
        return cls(claim_folder(root, prefix))

    @classmethod
    def of_checkpoint(cls, ckpt) -> RunFolder | None:
        """The run that wrote `ckpt` (RUN/checkpoints/FILE.ckpt, or RUN/FILE.ckpt): the folder with its config."""
        ckpt = Path(ckpt).resolve()
        for folder in (ckpt.parent.parent, ckpt.parent):
            if (folder / cls.CONFIG).is_file():
                return cls(folder)
        return None

    @classmethod
    def latest_with_last(cls, runs_dir, name: str) -> RunFolder | None:
        """The run of `name` under runs_dir whose last.ckpt is newest."""
        found = sorted(
            Path(runs_dir, name).glob(f"{RUN_PREFIX}*/{cls.CHECKPOINTS}/{cls.LAST}"), key=lambda p: p.stat().st_mtime
        )
        return cls(found[-1].parent.parent) if found else None

    @classmethod
    def under(cls, root) -> list[RunFolder]:
        """Every run that wrote metrics under root (ROOT/NAME/version_N), in name order."""
        return [cls(p.parent) for p in sorted(Path(root).glob(f"*/{RUN_PREFIX}*/{cls.METRICS}"))]
