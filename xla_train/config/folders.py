"""A folder of its own for every run, claimed with an exclusive mkdir; Lightning-free, so the benchmarks share it.

Listing `version_*` and adding 1 lets two processes started together pick the
same N. Here the folder is created without exist_ok: of two processes that try
the same N, one gets FileExistsError and takes the next.
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
