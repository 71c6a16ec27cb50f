"""What benchmarks feed the recipe's own data module when the real data set is not on the machine.

Speed does not depend on pixel values, and the real data sets are seldom on a benchmark machine, so
`data=synthetic` (the default) swaps only the arrays the data module loads for random ones of the recipe's
exact shapes and dtypes; batching, transform, loader and device transfer stay the recipe's own. Review lengths
follow aclImdb's, since length matters to the CPU LSTM (docs/results.md, "Synthetic inputs").
"""

from __future__ import annotations

import numpy as np

from xla_train.data.base import validation_size
from xla_train.errors import ConfigError, DataError

# Training-set sizes of the real data sets, for projecting an epoch when the data is not on this machine.
TRAIN_SIZES = {"CIFAR10DataModule": 50_000, "IMDBDataModule": 25_000}
PUNCT = np.array([".", ",", "!", "?", "...", ";", ":"])


def review_lengths(rng, n: int, longest: int) -> np.ndarray:
    """Words per review as in aclImdb: log-normal around its median of ~174, at least 10."""
    return np.clip(rng.lognormal(np.log(174), 0.75, n).astype(int), 10, longest)


def synthetic_reviews(n: int, seed: int = 0, words: int = 60_000) -> list[str]:
    """Review texts of aclImdb's lengths over a Zipf vocabulary, with capitals, punctuation and <br /> breaks."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    vocab = np.array(["".join(rng.choice(letters, k)) for k in rng.integers(1, 11, words)])
    cdf = np.cumsum(1.0 / np.arange(1, words + 1))
    cdf /= cdf[-1]
    counts = review_lengths(rng, n, 2500)
    toks = vocab[np.minimum(np.searchsorted(cdf, rng.random(counts.sum())), words - 1)]
    marks = rng.random(len(toks))
    toks = np.where(marks < 0.03, np.char.capitalize(toks), toks)
    toks = np.where(marks < 0.06, np.char.add(toks, rng.choice(PUNCT, len(toks))), toks)
    toks = np.where(marks > 0.995, np.char.add(toks, ".<br /><br />"), toks)
    ends = np.cumsum(counts)
    return [" ".join(toks[e - c : e]).capitalize() + "." for c, e in zip(counts, ends)]


def train_size(dm) -> tuple[int, str]:
    """(samples in the training split, where that number came from): the data itself if it is on this
    machine (never downloaded for this), else the real data set's published size."""
    if hasattr(dm, "download"):
        dm.download = False
    try:
        return len(dm.arrays("train")[0]), "data"
    except DataError:
        pass
    name = type(dm).__name__
    if name not in TRAIN_SIZES:
        raise DataError(
            f"the {name} data is not on this machine and its training-set size is not in "
            f"xla_train.bench.data.TRAIN_SIZES; point data_dir= at the data"
        )
    n = TRAIN_SIZES[name]
    return n - validation_size(n, getattr(dm, "val_fraction", 0.0) or 0.0), "published size"


def synthetic_arrays(dm, net, n: int, seed: int = 0) -> dict:
    """{'train'|'val'|'test': (inputs, labels)} of the module's shapes and dtypes, n training rows."""
    rng = np.random.default_rng(seed)
    kind = getattr(dm, "kind", None)
    if kind == "image":
        s = dm.image_size
        x = rng.integers(0, 256, (n, s, s, 3), dtype=np.uint8)
        classes = output_classes(dm, net, x)
    elif kind == "text":
        from xla_train.preprocess.text import PAD_ID

        lengths = review_lengths(rng, n, dm.maxlen)
        x = rng.integers(2, dm.vocab_size, (n, dm.maxlen), dtype=np.int64)
        x[np.arange(dm.maxlen)[None, :] < (dm.maxlen - lengths)[:, None]] = PAD_ID
        classes = 2
    else:
        raise ConfigError(f"data=synthetic knows image and text data modules, not {type(dm).__name__}; use data=real")
    y = rng.integers(0, classes, n).astype(np.int64)
    small = (x[: max(1, n // 10)], y[: max(1, n // 10)])
    return {"train": (x, y), "val": small, "test": small}


def output_classes(dm, net, x: np.ndarray) -> int:
    """How many classes the net tells apart: its logits on two samples, on the CPU (one logit: two classes)."""
    import torch

    was_training = net.training
    try:
        with torch.no_grad():
            out = net.eval()(dm.net_inputs(x[:2]))
    finally:
        net.train(was_training)
    return 2 if out.ndim == 1 or out.shape[-1] == 1 else int(out.shape[-1])


def use_data(dm, net, mode: str, samples: int) -> str:
    """Make `dm` serve at least `samples` training rows (steps x global batch); returns what it serves,
    'synthetic' or 'real'."""
    if mode == "synthetic":
        arrays = synthetic_arrays(dm, net, samples)
        dm.load_arrays = lambda: arrays
        return "synthetic"
    if hasattr(dm, "download"):
        dm.download = False
    have = len(dm.arrays("train")[0])
    if have < samples:
        raise ConfigError(
            f"data=real: the training split has {have} samples, fewer than the {samples} that "
            f"steps x batch need; lower steps= or the batch sizes, or use data=synthetic"
        )
    return "real"
