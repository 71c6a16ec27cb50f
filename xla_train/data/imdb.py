"""The Stanford Large Movie Review Dataset (IMDB) from its real layout, aclImdb/{train,test}/{pos,neg}/*.txt.

Downloaded staged and MD5-checked (data/download.py); a review that is not valid UTF-8 is decoded with
replacement characters, not refused. Tokenised arrays are cached beside the data, keyed on everything that changes
them, so later runs start at once. The vocabulary comes from the training split only (its validation share
included); val_fraction holds out a stratified share, and 0 validates on the test split as the Keras tutorial
does (docs/reliability.md, "Downloads and caches").
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

from xla_train.checkpoint import atomic_write
from xla_train.data.download import staged_download
from xla_train.data.texts import TextDataModule
from xla_train.errors import DataError
from xla_train.preprocess import text

URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
FILENAME = "aclImdb_v1.tar.gz"
MD5 = "7c2ac02c03563afcf9b574c7e56c153a"
FOLDER = "aclImdb"
LABELS = ["neg", "pos"]
DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".cache", "xla_train", "imdb")
CACHE_DIR = ".xla_train_cache"


def download_imdb(root: str) -> None:
    """Fetch and verify aclImdb_v1.tar.gz, then move the extracted aclImdb folder into `root` atomically."""
    staged_download("IMDB", URL, FILENAME, MD5, root, FOLDER, present=lambda: (Path(root) / FOLDER).is_dir())


def find_folder(data_dir: str) -> Path:
    """data_dir may be the folder holding aclImdb/ or aclImdb/ itself."""
    d = Path(data_dir)
    return d if (d / "train").is_dir() or (d / "test").is_dir() else d / FOLDER


def list_split(folder: Path, split: str) -> tuple[list[Path], np.ndarray, tuple]:
    """(review files in a fixed order, labels 0=neg 1=pos, a fingerprint of the files)."""
    files, labels, fingerprint = [], [], []
    for label, name in enumerate(LABELS):
        d = folder / split / name
        if not d.is_dir():
            raise DataError(
                f"IMDB at {folder} has no {split}/{name} folder; the layout is "
                f"aclImdb/{{train,test}}/{{pos,neg}}/*.txt (re-extract {FILENAME})"
            )
        entries = sorted((e.name, e.stat().st_size) for e in os.scandir(d) if e.name.endswith(".txt") and e.is_file())
        if not entries:
            raise DataError(f"IMDB folder {d} holds no reviews (*.txt); re-extract {FILENAME} there")
        files += [d / n for n, _ in entries]
        labels += [label] * len(entries)
        fingerprint.append((split, name, len(entries), sum(s for _, s in entries)))
    return files, np.asarray(labels, dtype=np.int64), tuple(fingerprint)


def read_reviews(files: list[Path]):
    """Yields each review as text, one file at a time; bytes that are not UTF-8 become U+FFFD."""
    for f in files:
        yield f.read_bytes().decode("utf-8", errors="replace")


def load_imdb(
    data_dir: str,
    download: bool,
    maxlen: int,
    vocab_size: int,
    tokenizer_json: str | None = None,
    sides: tuple[str, str] = ("pre", "pre"),
) -> dict:
    """{'train'|'test': (int64 (N, maxlen) ids, labels), 'tokenizer': JSON string}, from the cache when it is current.

    With `tokenizer_json` (a checkpoint's) the reviews are encoded with that tokenizer; otherwise one is built
    from the training split. `sides`: (padding, truncating), "pre" or "post" each."""
    folder = find_folder(data_dir)
    if not folder.is_dir():
        if download:
            download_imdb(str(folder.parent))
        if not folder.is_dir():
            raise DataError(
                f"IMDB is missing at {folder}; download {URL} ({FILENAME}) and extract it into "
                f"{folder.parent}, or run with download=true on a machine with network"
            )
    listing = {split: list_split(folder, split) for split in ("train", "test")}
    key = {
        "maxlen": maxlen,
        "vocab_size": vocab_size,
        "tokenizer": text.tokenizer_version(),
        "files": [listing[s][2] for s in listing],
    }
    if sides != ("pre", "pre"):  # in the key only where set, so that the caches written before stay current
        key["padding"], key["truncating"] = sides
    if tokenizer_json is not None:
        key["given_tokenizer"] = hashlib.sha1(tokenizer_json.encode()).hexdigest()
    cache = folder / CACHE_DIR / f"tokens-{hashlib.sha1(json.dumps(key).encode()).hexdigest()[:16]}.npz"
    cached = _read_cache(cache, key)
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    reviews = {split: list(read_reviews(files)) for split, (files, _, _) in listing.items()}
    ids, tokenizer = text.tokenise(reviews, maxlen, vocab_size, tokenizer_json, *sides)
    out = {"tokenizer": tokenizer, **{split: (ids[split], listing[split][1]) for split in listing}}
    print(
        f"tokenised {sum(map(len, reviews.values())):,} IMDB reviews in {time.perf_counter() - t0:.1f} s "
        f"(vocabulary {vocab_size:,}, maxlen {maxlen}); caching them in {cache.parent}",
        flush=True,
    )
    _write_cache(cache, out, key)
    return out


def _read_cache(path: Path, key: dict) -> dict | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != json.dumps(key):
                return None
            return {
                "tokenizer": str(z["tokenizer"]),
                **{s: (z[f"{s}_x"].astype(np.int64), z[f"{s}_y"].astype(np.int64)) for s in ("train", "test")},
            }
    except Exception:  # a damaged cache is rebuilt, never trusted
        return None


def _write_cache(path: Path, data: dict, key: dict) -> None:
    """Written beside the data, atomically; a read-only data folder (e.g. a Kaggle input) just goes uncached."""
    dtype = np.uint16 if key["vocab_size"] <= np.iinfo(np.uint16).max + 1 else np.int32
    arrays = {"tokenizer": np.array(data["tokenizer"]), "key": np.array(json.dumps(key))}
    for s in ("train", "test"):
        arrays[f"{s}_x"], arrays[f"{s}_y"] = data[s][0].astype(dtype), data[s][1].astype(np.int8)
    try:
        atomic_write(path, lambda f: np.savez(f, **arrays))
    except OSError as e:
        warnings.warn(
            f"could not cache the tokenised reviews in {path.parent} ({e.strerror or e}); the next run tokenises again",
            stacklevel=2,
        )


class IMDBDataModule(TextDataModule):
    def __init__(self, data_dir: str | None = None, download: bool = True, **settings):
        super().__init__(**settings)
        self.data_dir = os.path.expanduser(data_dir or DEFAULT_DATA_DIR)
        self.download = download

    @property
    def labels(self) -> list[str]:
        return list(LABELS)

    def load_arrays(self):
        d = load_imdb(self.data_dir, self.download, self.maxlen, self.vocab_size, self._given_tokenizer, self.sides)
        self._tokenizer_json = d["tokenizer"]
        return {"train": d["train"], "test": d["test"]}  # validation: carved by BaseDataModule
