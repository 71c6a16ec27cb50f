"""Tiny data sets in the real on-disk formats the data modules read."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_cifar10(root: Path, per_batch: int = 40, test: int = 80, seed: int = 0) -> Path:
    """cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}, pickled as the real files are.

    Each class gets a distinct mean colour, so a model can learn something in an epoch.
    """
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)

    def batch(n: int, name: str) -> dict:
        labels = rng.integers(0, 10, n)
        base = (labels[:, None] * 25).astype(np.int64)
        data = np.clip(base + rng.integers(0, 40, (n, 3072)), 0, 255).astype(np.uint8)
        return {
            "batch_label": name,
            "labels": labels.tolist(),
            "data": data,
            "filenames": [f"{i}.png" for i in range(n)],
        }

    for i in range(1, 6):
        with open(folder / f"data_batch_{i}", "wb") as f:
            pickle.dump(batch(per_batch, f"training batch {i} of 5"), f)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(batch(test, "testing batch 1 of 1"), f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": CLASSES, "num_cases_per_batch": per_batch, "num_vis": 3072}, f)
    return root
