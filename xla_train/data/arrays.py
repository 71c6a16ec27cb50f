"""A user's own arrays, from a .npz file (keras.datasets' names) or handed over in memory by xla_train.fit(x=, y=).

uint8 images (N, H, W, C) or (N, H, W) take the image path: sent as uint8, normalised on the device with their own
channel statistics, which the checkpoint keeps so that `predict` and the server read PNG files alike. Anything else
(float (N, C, H, W), int token ids (N, T), any other float rows) goes to the net as it is, and the checkpoint keeps
its shape and dtype for `predict` on .npy files. Labels are integers 0..C-1 (docs/own_model.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from xla_train.data.base import keep, with_test_split
from xla_train.data.image_base import ImageTransform, MeasuredImageDataModule
from xla_train.errors import ConfigError, DataError

SPLIT_NAMES = {"train": "training", "val": "validation", "test": "test"}
NPZ_NAMES = ("x_train", "y_train", "x_test", "y_test")  # keras.datasets' load_data names; x_val, y_val optional


def as_array(a, what: str) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    try:
        return np.asarray(a)
    except Exception as e:
        raise ConfigError(
            f"{what} is not an array ({type(e).__name__}); give a numpy array or a torch tensor"
        ) from None


def refuse_non_finite(a: np.ndarray, what: str, advice: str, chunk: int = 4096) -> None:
    """One line naming the first row of `a` that holds NaN or inf, and how many rows do; read a chunk of rows at a
    time, so a large array is not copied whole."""
    bad_rows: list[int] = []
    kind = None
    for start in range(0, len(a), chunk):
        rows = a[start : start + chunk].reshape(min(chunk, len(a) - start), -1)
        bad = ~np.isfinite(rows).all(axis=1)
        if bad.any():
            found = np.flatnonzero(bad)
            if kind is None:
                kind = "NaN" if np.isnan(rows[found[0]]).any() else "inf"
            bad_rows += (found + start).tolist()
    if bad_rows:
        more = f" ({len(bad_rows)} rows in all)" if len(bad_rows) > 1 else ""
        raise ConfigError(f"{what} holds {kind} in row {bad_rows[0]}{more}; {advice}")


def as_labels(y, n: int, what: str, split: str = "training") -> np.ndarray:
    """Integer labels (N,) or (N, 1), integral floats allowed; one line for anything else."""
    y = as_array(y, what)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ConfigError(f"{what} has shape {y.shape}; labels are one integer per sample, shape ({n},)")
    if len(y) != n:
        raise ConfigError(f"{what} has {len(y)} labels for {n} samples; give one label per sample")
    if np.issubdtype(y.dtype, np.floating):
        refuse_non_finite(y, f"{what} (the {split} labels)", "labels are class numbers 0..C-1")
    if y.dtype == bool or not np.issubdtype(y.dtype, np.number) or (y.size and not np.all(np.mod(y, 1) == 0)):
        raise ConfigError(f"{what} holds {y.dtype} values; labels are class numbers 0..C-1")
    return y.astype(np.int64)


def as_inputs(x, what: str, split: str = "training") -> np.ndarray:
    x = as_array(x, what)
    if x.ndim < 2 or len(x) == 0:
        raise ConfigError(f"{what} has shape {x.shape}; give (N, ...) samples, N >= 1")
    if x.dtype == np.uint8 and x.ndim == 3 and x.shape[1] == x.shape[2]:  # (N, H, W) grey, as keras.datasets.mnist
        x = x[..., None]
    if x.dtype == np.uint8 and ArraysDataModule.is_images(x):
        return x
    if np.issubdtype(x.dtype, np.floating):
        refuse_non_finite(x, f"{what} (the {split} inputs)", "drop or fill those rows: one makes every loss NaN")
    if np.issubdtype(x.dtype, np.floating) or x.dtype == np.uint8:  # uint8 that is not images: numbers, as floats
        return x.astype(np.float32, copy=False)
    if np.issubdtype(x.dtype, np.integer) and x.dtype != np.uint64:
        return x.astype(np.int64, copy=False)  # token ids, as embeddings take them
    raise ConfigError(f"{what} holds {x.dtype} values; give numbers (uint8 images, floats, or integer token ids)")


class ArraysDataModule(MeasuredImageDataModule):
    """path: a .npz with x_train, y_train and optionally x_test, y_test, x_val, y_val. Without a test split,
    test_fraction of the training samples is held out for the final test; without a validation split,
    val_fraction (the shared rule). class_names names the labels 0..C-1."""

    def __init__(
        self,
        path: str | None = None,
        class_names: list[str] | None = None,
        test_fraction: float = 0.2,
        batch_size: int = 32,
        **settings,
    ):
        super().__init__(batch_size=batch_size, **settings)
        self.path, self.class_names, self.test_fraction = path, class_names, test_fraction
        self._held: dict | None = None

    def hold(self, x, y, validation_data=None, test_data=None) -> None:
        """The splits as arrays in memory (xla_train.fit(x=, y=, validation_data=, test_data=))."""
        held = {"train": (x, y)}
        for split, pair in (("val", validation_data), ("test", test_data)):
            if pair is not None:
                if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                    raise ConfigError(f"{split} data must be a pair (x, y), not {type(pair).__name__}")
                held[split] = tuple(pair)
        self._held, self._arrays = held, None

    def _read(self) -> dict:
        if self._held is not None:
            return self._held
        if not self.path:
            raise ConfigError(
                "recipe=arrays needs its arrays: data.path=FILE.npz (x_train, y_train, x_test, y_test), or in "
                "Python xla_train.fit(net=..., x=..., y=...)"
            )
        path = Path(self.path).expanduser()
        try:
            with np.load(path, allow_pickle=False) as z:
                found = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise DataError(f"data.path={self.path} does not exist; give a .npz file") from None
        except (ValueError, OSError) as e:
            raise DataError(f"{path} is not a readable .npz file ({str(e).splitlines()[0]})") from None
        if "x_train" not in found or "y_train" not in found:
            raise DataError(
                f"{path} holds {', '.join(sorted(found)) or 'nothing'}; it needs x_train and y_train (and x_test, "
                f"y_test), the names keras.datasets' load_data gives"
            )
        out = {"train": (found["x_train"], found["y_train"])}
        for split, (xk, yk) in (("test", ("x_test", "y_test")), ("val", ("x_val", "y_val"))):
            if (xk in found) != (yk in found):
                raise DataError(f"{path} has {xk if xk in found else yk} without {yk if xk in found else xk}")
            if xk in found:
                out[split] = (found[xk], found[yk])
        return out

    def load_arrays(self):
        arrays = {}
        for split, (x, y) in self._read().items():
            what, name = "x" if split == "train" else f"{split} x", SPLIT_NAMES[split]
            x = as_inputs(x, what, name)
            arrays[split] = (x, as_labels(y, len(x), what.replace("x", "y"), name))
        shape, dtype = arrays["train"][0].shape[1:], arrays["train"][0].dtype
        for split, (x, _) in arrays.items():
            if x.shape[1:] != shape or x.dtype != dtype:
                raise ConfigError(
                    f"the {split} inputs are {x.dtype} {x.shape[1:]} per sample, the training inputs {dtype} "
                    f"{shape}; every split must have the same sample shape and type"
                )
        classes = max(int(y.max()) for _, y in arrays.values()) + 1
        if min(int(y.min()) for _, y in arrays.values()) < 0:
            raise ConfigError("the labels include a negative number; labels are class numbers 0..C-1")
        if self.class_names is not None and len(self.class_names) < classes:
            raise ConfigError(f"class_names has {len(self.class_names)} names, but the labels run to {classes - 1}")
        arrays = with_test_split(arrays, self.test_fraction, self.split_seed, "the arrays")
        images = arrays["train"][0] if self.is_images(arrays["train"][0]) else None  # the test share unseen
        self.measured(self.class_names or [str(i) for i in range(classes)], images)
        return arrays

    @staticmethod
    def is_images(x: np.ndarray) -> bool:
        return x.dtype == np.uint8 and x.ndim == 4 and x.shape[1] == x.shape[2] and x.shape[3] in (1, 3)

    @property
    def kind(self) -> str:
        return "image" if self.is_images(self.arrays("train")[0]) else "array"

    @property
    def image_size(self) -> int:
        return int(self.arrays("train")[0].shape[1])

    def probe_inputs(self) -> torch.Tensor:
        """As the base's, with the largest id of any split in integer inputs (token ids): an embedding too small
        fails here on the CPU, where XLA would clamp the id silently."""
        x = super().probe_inputs()
        if self.kind == "array" and not x.is_floating_point():
            x = x.clone()
            x[0].view(-1)[-1] = self.top_id()
        return x

    def top_id(self) -> int:
        return max(int(self.arrays(s)[0].max()) for s in ("train", "val", "test"))

    def probe_hint(self, error: Exception) -> str:
        if not isinstance(error, IndexError) or self.kind != "array":
            return ""
        return f"; the inputs' ids run to {self.top_id()}, so an embedding of the net needs {self.top_id() + 1} rows"

    def transform(self, train: bool):
        if self.kind == "image":
            return super().transform(train)
        return ImageTransform(augment=False)  # as stored: torch.from_numpy, nothing else

    def preparer(self):
        return super().preparer() if self.kind == "image" else keep  # stored as the net takes them (as_inputs)

    def inference_info(self) -> dict:
        if self.kind == "image":
            return super().inference_info()
        x = self.arrays("train")[0]
        dtype = "int64" if np.issubdtype(x.dtype, np.integer) else "float32"
        return {"kind": "array", "labels": self.labels, "shape": list(x.shape[1:]), "dtype": dtype}
