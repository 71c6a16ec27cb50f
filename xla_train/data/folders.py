"""A user's own data as it usually lies: folders of classes (DIR/train/CLASS/FILE), a CSV of text,label, labels.

The layout is aclImdb's and Keras' image_dataset_from_directory's: class names are the folder names, sorted, and a
label is its class's place in that order. Every problem names the file or folder and says what would work, before
anything trains.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from xla_train.errors import DataError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}


def class_folders(root: Path, split: str, suffixes: set[str], what: str) -> dict[str, list[Path]]:
    """{class name: its files, sorted} of root/split/CLASS/, classes sorted by name."""
    folder = root / split
    if not folder.is_dir():
        raise DataError(f"{root} has no {split}/ folder; the layout is {root}/{split}/CLASS/FILE, one folder per class")
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"{folder} holds no class folders; put each class's {what} in {folder}/CLASS_NAME/")
    out = {}
    for d in classes:
        files = sorted(f for f in d.iterdir() if f.is_file() and f.suffix.lower() in suffixes)
        if not files:
            raise DataError(f"class folder {d} holds no {what} ({', '.join(sorted(suffixes))}); add some, or remove it")
        out[d.name] = files
    return out


def folder_splits(
    root: Path, suffixes: set[str], what: str
) -> tuple[list[str], dict[str, tuple[list[Path], np.ndarray]]]:
    """(class names, {'train' and, if root/test/ exists, 'test': (files, labels)}); the test split's classes must be
    training classes."""
    train = class_folders(root, "train", suffixes, what)
    names = list(train)
    splits = {"train": train}
    if (root / "test").is_dir():
        splits["test"] = class_folders(root, "test", suffixes, what)
        unknown = sorted(set(splits["test"]) - set(names))
        if unknown:
            raise DataError(
                f"{root}/test has class folder(s) {', '.join(unknown)} that {root}/train lacks; the classes are "
                f"{', '.join(names)}"
            )
    out = {}
    for split, by_class in splits.items():
        files = [f for c in by_class for f in by_class[c]]
        labels = np.concatenate([np.full(len(by_class[c]), names.index(c), np.int64) for c in by_class])
        out[split] = (files, labels)
    return names, out


def read_text_csv(path: Path) -> tuple[list[str], list[str]]:
    """(texts, raw labels as written) of a CSV with a header naming `text` and `label` columns (others ignored)."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a long review is one field
    if not path.is_file():
        raise DataError(f"{path} does not exist; give a CSV file with text,label columns")
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        columns = [c.strip() for c in reader.fieldnames or []]
        if "text" not in columns or "label" not in columns:
            raise DataError(
                f"{path} has columns {', '.join(columns) or '(none)'}; it needs a header with a text and a label "
                f"column (text,label)"
            )
        reader.fieldnames = columns
        texts, labels = [], []
        for line, row in enumerate(reader, start=2):
            text, label = row.get("text"), row.get("label")
            if text is None or label is None or not label.strip():
                raise DataError(f"{path}:{line} has no label; every row needs a text and a label")
            if label.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
                raise DataError(
                    f"{path}:{line} has label {label.strip()!r}, a missing number rather than a class; every row "
                    f"needs its class (a name, or an integer 0..C-1)"
                )
            texts.append(text)
            labels.append(label.strip())
    if not texts:
        raise DataError(f"{path} holds no rows under its text,label header")
    return texts, labels


def label_names(raw: dict[str, list[str]], where: str) -> tuple[list[str], dict[str, np.ndarray]]:
    """(class names, {split: int labels}) from labels as written: all integers 0..C-1 keep their numbers (names
    "0".."C-1"); otherwise they are names, sorted, and every split's must be a training split's."""
    values = [v for split in raw.values() for v in split]
    if all(v.lstrip("-").isdigit() for v in values):
        numbers = {s: np.asarray([int(v) for v in vs], np.int64) for s, vs in raw.items()}
        low = min(int(n.min()) for n in numbers.values())
        if low < 0:
            raise DataError(f"{where} has label {low}; integer labels run from 0 to the number of classes less one")
        return [str(i) for i in range(max(int(n.max()) for n in numbers.values()) + 1)], numbers
    names = sorted(set(raw["train"]))
    index = {n: i for i, n in enumerate(names)}
    for split, vs in raw.items():
        unknown = sorted(set(vs) - set(index))
        if unknown:
            raise DataError(
                f"{where}: the {split} split has label(s) {', '.join(map(repr, unknown[:3]))} that no training row "
                f"has; the training labels are {', '.join(names[:10])}"
            )
    return names, {s: np.asarray([index[v] for v in vs], np.int64) for s, vs in raw.items()}


def recipe_for(data) -> tuple[str, Path]:
    """(the recipe that reads `data`, its path): a .npz is arrays, a .csv texts, a folder of class folders images
    or texts by the files in its train/ classes."""
    path = Path(data).expanduser()
    if path.is_file() and path.suffix.lower() in (".npz", ".csv"):
        return ("arrays" if path.suffix.lower() == ".npz" else "texts"), path
    if path.is_dir():
        suffixes = {f.suffix.lower() for d in (path / "train").glob("*/") for f in d.iterdir() if f.is_file()}
        if suffixes & IMAGE_SUFFIXES:
            return "images", path
        if ".txt" in suffixes:
            return "texts", path
        raise DataError(
            f"data={data}: {path}/train/CLASS/ holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}) or texts "
            f"(.txt); the layout is {path}/train/CLASS/FILE"
        )
    raise DataError(f"data={data} is neither a folder (DIR/train/CLASS/FILE) nor a .npz or .csv file")
