"""Text classification data: texts tokenised into fixed-length ids, as the IMDB recipe does, for any texts.

TextDataModule is the shared part: a WordLevel vocabulary of the training texts only (validation share included,
labels unused), each text cut and padded to maxlen (at the front, or at the back: padding, truncating), a
checkpoint's own tokenizer when one is given, and what a text checkpoint carries, its padding too. TextsDataModule
reads a user's texts: DIR/train/CLASS/*.txt (aclImdb's layout, any classes) or a CSV with text,label columns; IMDB
(data/imdb.py) adds its download and token cache. The net gets the vocabulary size through its own init argument
(docs/own_model.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from xla_train import compat
from xla_train.data.base import BaseDataModule, with_test_split
from xla_train.data.folders import folder_splits, label_names, read_text_csv
from xla_train.errors import ConfigError, DataError
from xla_train.preprocess import text


def ids_to_tensor(ids: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))


class _Packs(TorchFunctionMode):
    """Notes whether the forward it runs around calls pack_padded_sequence."""

    packed = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.packed = self.packed or func is compat.packing_ops()[0]
        return func(*args, **(kwargs or {}))


class TextDataModule(BaseDataModule):
    kind = "text"

    def __init__(
        self,
        maxlen: int = 500,
        vocab_size: int = 10000,
        padding: Literal["pre", "post"] = "pre",
        truncating: Literal["pre", "post"] = "pre",
        **settings,
    ):
        """padding and truncating: where a text is padded and cut to maxlen, at the front ("pre", Keras'
        pad_sequences default, for a net that reads the last step) or at the back ("post", for a net that packs
        its batch with pack_padded_sequence)."""
        super().__init__(**settings)
        if maxlen < 1:
            raise ConfigError(f"maxlen={maxlen} must be at least 1 (the Keras tutorial uses 500)")
        if vocab_size < 3:
            raise ConfigError(f"vocab_size={vocab_size} must be at least 3: ids 0 and 1 are padding and unknown")
        for key, value in (("padding", padding), ("truncating", truncating)):
            if value not in text.SIDES:
                raise ConfigError(f"{key}={value!r}; use pre (at the front, the default) or post (at the back)")
        self.maxlen, self.vocab_size = maxlen, vocab_size
        self.padding, self.truncating = padding, truncating
        self._tokenizer_json: str | None = None
        self._given_tokenizer: str | None = None

    def adopt(self, block: dict) -> None:
        """Encode with the checkpoint's tokenizer, not one rebuilt from the texts: the token ids under a trained
        model must never change, whatever vocabulary the texts would give."""
        sides = (block.get("padding", "pre"), block.get("truncating", "pre"))  # a checkpoint from before: the front
        if self._arrays is not None and (self._tokenizer_json != block["tokenizer"] or sides != self.sides):
            self._arrays = None  # encoded with another tokenizer or padding: encode again
        self._given_tokenizer = block["tokenizer"]
        self.padding, self.truncating = sides

    @property
    def sides(self) -> tuple[str, str]:
        return self.padding, self.truncating

    def encode(self, texts: dict[str, list[str]]) -> dict[str, np.ndarray]:
        """{split: ids} of {split: texts}, with the given tokenizer or one built from texts['train']."""
        ids, self._tokenizer_json = text.tokenise(
            texts, self.maxlen, self.vocab_size, self._given_tokenizer, self.padding, self.truncating
        )
        return ids

    def transform(self, train: bool):
        return ids_to_tensor

    def probe_inputs(self) -> torch.Tensor:
        """Two training rows, the first ending in the vocabulary's largest id: a net whose embedding is smaller
        than the vocabulary fails here on the CPU, where XLA would clamp the id silently."""
        ids = np.array(self.arrays("train")[0][:2], dtype=np.int64)
        ids[0, -1] = self.vocab_size - 1
        return torch.from_numpy(ids)

    def check_net(self, net) -> None:
        """The base's check, and a net that packs its batch refused on front padding: pack_padded_sequence takes
        each text's first `length` steps, which padding=pre fills with padding, cutting the text's end."""
        with _Packs() as seen:
            super().check_net(net)
        if seen.packed and self.padding == "pre":
            raise ConfigError(
                f"the net ({type(net).__name__}) packs its batch (pack_padded_sequence), which reads each text from "
                "its first step, but data.padding=pre pads texts at the front; set data.padding=post"
            )

    def probe_hint(self, error: Exception) -> str:
        if not isinstance(error, IndexError):
            return ""
        v = self.vocab_size
        return (
            f"; the vocabulary's ids run to {v - 1} (data.vocab_size={v}), so the net's embedding needs {v} rows: "
            f"set its vocabulary size to {v} (model.net.vocab_size={v}), or data.vocab_size to its rows"
        )

    def inference_info(self) -> dict:
        self.setup()
        return {
            "kind": self.kind,
            "labels": list(self.labels),
            "maxlen": self.maxlen,
            "padding": self.padding,
            "truncating": self.truncating,
            "tokenizer": self._tokenizer_json,
            "tokenizer_version": text.tokenizer_version(),
        }


class TextsDataModule(TextDataModule):
    """path: DIR (DIR/train/CLASS/*.txt, DIR/test/CLASS/*.txt) or FILE.csv (text,label columns; `test` another
    CSV). A label may be a name or an integer 0..C-1. Without a test split, test_fraction of the training texts
    is held out for the final test."""

    def __init__(
        self,
        path: str | None = None,
        test: str | None = None,
        test_fraction: float = 0.2,
        batch_size: int = 32,
        **settings,
    ):
        super().__init__(batch_size=batch_size, **settings)
        self.path, self.test, self.test_fraction = path, test, test_fraction
        self._names: list[str] | None = None

    @property
    def labels(self) -> list[str]:
        self.setup()
        return self._names

    def read_texts(self) -> dict[str, tuple[list[str], np.ndarray]]:
        if not self.path:
            raise ConfigError(
                "recipe=texts needs its texts: data.path=DIR (DIR/train/CLASS/*.txt) or data.path=FILE.csv"
            )
        path = Path(self.path).expanduser()
        if path.is_dir():
            if self.test:
                raise ConfigError(
                    f"data.test={self.test} is for a CSV; a folder's test texts are in {path}/test/CLASS/"
                )
            self._names, splits = folder_splits(path, {".txt"}, "texts (.txt files)")
            return {
                s: ([f.read_bytes().decode("utf-8", errors="replace") for f in files], y)
                for s, (files, y) in splits.items()
            }
        if path.suffix.lower() != ".csv":
            raise DataError(f"data.path={self.path} is neither a folder nor a .csv file; give DIR or FILE.csv")
        raw = {"train": read_text_csv(path)}
        if self.test:
            raw["test"] = read_text_csv(Path(self.test).expanduser())
        self._names, labels = label_names({s: r[1] for s, r in raw.items()}, str(path))
        return {s: (r[0], labels[s]) for s, r in raw.items()}

    def load_arrays(self):
        read = {s: (np.array(t, dtype=object), y) for s, (t, y) in self.read_texts().items()}
        read = with_test_split(read, self.test_fraction, self.split_seed, str(self.path))  # before the vocabulary
        ids = self.encode({s: list(t) for s, (t, _) in read.items()})
        return {s: (ids[s], y) for s, (_, y) in read.items()}
