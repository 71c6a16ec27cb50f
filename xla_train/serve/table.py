"""A split's predictions as a CSV table: one row per sample, in the data's order, never over another file.

Plain numpy and the atomic writer: neither Lightning nor torch_xla. The table
is written in full to a hidden file beside its place, then linked into place,
which fails rather than replaces when the name is taken, so neither a crash nor
a second predict running at the same moment can leave a half table or lose one.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from xla_train.checkpoint import atomic_write
from xla_train.errors import ConfigError, UserError


def table_text(probs: np.ndarray, labels: np.ndarray | None, names: list[str], all_probs: bool) -> str:
    """index,label,predicted,probability[,p_<label>...] for every row; `label` only when the truth is known."""
    buf = io.StringIO()
    head = ["index"] + (["label"] if labels is not None else []) + ["predicted", "probability"]
    if all_probs:
        head += [f"p_{n}" for n in names]
    buf.write(",".join(head) + "\n")
    top = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=np.int64)
    for i, (row, k) in enumerate(zip(probs, top)):
        cells = [str(i)] + ([names[int(labels[i])]] if labels is not None else [])
        cells += [names[int(k)], f"{float(row[k]):.7f}"]
        if all_probs:
            cells += [f"{float(p):.7f}" for p in row]
        buf.write(",".join(cells) + "\n")
    return buf.getvalue()


def accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    return float((probs.argmax(axis=1) == labels).mean()) if len(labels) else float("nan")


def check_out(out: str | os.PathLike) -> Path:
    """An out= that can take the table: a new .csv file in a folder that exists or can be made."""
    path = Path(out).expanduser()
    if path.suffix.lower() != ".csv":
        raise ConfigError(f"out={out} should name a .csv file, e.g. out=predictions.csv")
    if path.exists():
        raise ConfigError(f"out={out} already exists; predict never overwrites a file: give a new name")
    if path.parent.exists() and not path.parent.is_dir():
        raise ConfigError(f"out={out}: {path.parent} is not a folder")
    return path


def default_out(run_folder: Path, split: str, ckpt: Path) -> list[Path]:
    """Candidate names in the checkpoint's run folder: predictions-SPLIT-CKPT.csv, then -2, -3, ..."""
    stem = f"predictions-{split}-{ckpt.stem}"
    return [run_folder / f"{stem}.csv"] + [run_folder / f"{stem}-{k}.csv" for k in range(2, 1000)]


def write_new(candidates: list[Path], text: str) -> Path:
    """The text in the first candidate name that is free; a taken name is never replaced."""
    first = candidates[0]
    staging = first.parent / f".{first.name}.{os.getpid()}.staging"
    try:
        atomic_write(staging, lambda f: f.write(text.encode()))
    except OSError as e:
        raise UserError(f"cannot write {first}: {e.strerror or e}") from None
    try:
        for path in candidates:
            try:
                os.link(staging, path)  # atomic, and refuses a name that exists
                return path
            except FileExistsError:
                continue
        raise UserError(f"{first} and its numbered variants all exist; give out=FILE.csv")
    finally:
        staging.unlink(missing_ok=True)
