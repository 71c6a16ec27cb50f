"""Reading what a user asks to predict: image files, folders of them, or .npy arrays.

Every problem is a one-line error that names the file and says what would work.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xla_train.errors import UserError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}


def expand_paths(specs: list[str]) -> list[Path]:
    paths: list[Path] = []
    for spec in specs:
        p = Path(spec).expanduser()
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES | {".npy"})
            if not found:
                raise UserError(f"folder {p} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}) or .npy files")
            paths.extend(found)
        elif p.is_file():
            paths.append(p)
        else:
            raise UserError(f"input {p} does not exist")
    if not paths:
        raise UserError("nothing to predict: give inputs=FILE[,FILE...] (images, a folder or a .npy array)")
    return paths


def read_image(path: Path, size: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise UserError(f"{path} is not a readable image ({type(e).__name__}); use PNG or JPEG files") from None


def read_array(path: Path) -> np.ndarray:
    """A .npy of images: (N, H, W, C) or (H, W, C), C in {1, 3}, or channels-first; uint8 or floats in [0, 1]."""
    try:
        a = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise UserError(f"{path} is not a readable .npy array ({str(e).splitlines()[0]})") from None
    expected = "expected images as (N, H, W, 3) or (N, 3, H, W), uint8 0..255 or float 0..1"
    if a.ndim == 3:
        a = a[None]
    if a.ndim != 4:
        raise UserError(f"{path} has shape {a.shape}; {expected}")
    if a.shape[-1] not in (1, 3) and a.shape[1] in (1, 3):
        a = a.transpose(0, 2, 3, 1)
    if a.shape[-1] not in (1, 3) or a.shape[0] == 0:
        raise UserError(f"{path} has shape {a.shape}; {expected}")
    if a.dtype != np.uint8:
        if not np.issubdtype(a.dtype, np.floating) or a.size and (np.nanmin(a) < 0 or np.nanmax(a) > 1):
            raise UserError(f"{path} has dtype {a.dtype} with values outside 0..1; {expected}")
        a = (np.nan_to_num(a) * 255).round().astype(np.uint8)
    if a.shape[-1] == 1:
        a = np.repeat(a, 3, axis=-1)
    return a


def read_images(specs: list[str], size: int) -> tuple[list[str], np.ndarray]:
    """(one name per image, uint8 (N, H, W, 3) with every image resized to size x size)."""
    from xla_train.preprocess import resize_images

    names, arrays = [], []
    for p in expand_paths(specs):
        if p.suffix.lower() == ".npy":
            a = resize_images(read_array(p), size)
            names += [f"{p}[{i}]" for i in range(len(a))]
            arrays.append(a)
        else:
            names.append(str(p))
            arrays.append(read_image(p, size)[None])
    return names, np.concatenate(arrays)
