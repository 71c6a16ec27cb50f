"""Reading what a user asks to predict: image files, folders of them, .npy arrays, or text reviews.

Every problem is a one-line error that names the file and says what would work.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from xla_train.errors import UserError
from xla_train.preprocess.images import decode_image, luma

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}


def expand_paths(specs: list[str], suffixes: set[str] | None = None, what: str | None = None) -> list[Path]:
    """Files as given, and each folder's files with one of `suffixes` (images and .npy by default), its subfolders'
    too (the class-folder tree training reads, DIR/test/CLASS/*), sorted by path; hidden files and folders skipped."""
    if suffixes is None:
        suffixes = IMAGE_SUFFIXES | {".npy"}
        what = f"images ({', '.join(sorted(IMAGE_SUFFIXES))}) or .npy files"
    paths: list[Path] = []
    for spec in specs:
        p = Path(spec).expanduser()
        if p.is_dir():
            found = sorted(
                f
                for f in p.rglob("*")
                if f.is_file() and f.suffix.lower() in suffixes and not _hidden(f.relative_to(p))
            )
            if not found:
                raise UserError(f"folder {p} holds no {what}")
            paths.extend(found)
        elif p.is_file():
            paths.append(p)
        else:
            raise UserError(f"input {p} does not exist")
    if not paths:
        raise UserError("nothing to predict: give inputs=FILE[,FILE...]")
    return paths


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def folder_classes(specs: list[str], names: list[str], labels: list[str]) -> list[int] | None:
    """Each input's class index when every one lies in a class folder of a folder given (DIR/CLASS/..., CLASS one of
    the checkpoint's labels), as in the tree training reads; else None. `names`: the readers' names, FILE or
    FILE[i] (a .npy's sample) or FILE:LINE (a review per line)."""
    roots = [Path(s).expanduser() for s in specs if Path(s).expanduser().is_dir()]
    index = {label: i for i, label in enumerate(labels)}
    classes = []
    for name in names:
        source = Path(re.sub(r"(\[\d+\]|:\d+)$", "", name))
        found = None
        for root in roots:
            if source.is_relative_to(root) and len(source.relative_to(root).parts) >= 2:
                found = index.get(source.relative_to(root).parts[0])
                break
        if found is None:
            return None
        classes.append(found)
    return classes or None


def unreadable(path: Path) -> UserError:
    return UserError(
        f"{path} cannot be read: permission denied; make it readable (chmod +r) or copy it somewhere you can read"
    )


def read_image(path: Path, size: int, channels: int = 3) -> np.ndarray:
    return decode_image(path, size, str(path), channels)


def read_array(path: Path, channels: int = 3) -> np.ndarray:
    """A .npy of images: (N, H, W, C) or (H, W, C), C in {1, 3}, or channels-first; uint8 or floats in [0, 1];
    made `channels` deep (grey to RGB by repeating, RGB to grey as PIL's "L" weighs the channels)."""
    try:
        a = np.load(path, allow_pickle=False)
    except PermissionError:
        raise unreadable(path) from None
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
    if a.shape[-1] == 1 and channels == 3:
        a = np.repeat(a, 3, axis=-1)
    elif a.shape[-1] == 3 and channels == 1:
        a = luma(a)
    return a


def read_images(specs: list[str], size: int, channels: int = 3) -> tuple[list[str], np.ndarray]:
    """(one name per image, uint8 (N, size, size, channels) with every image resized to size x size)."""
    from xla_train.preprocess.images import resize_images

    names, arrays = [], []
    for p in expand_paths(specs):
        if p.suffix.lower() == ".npy":
            a = resize_images(read_array(p, channels), size)
            names += [f"{p}[{i}]" for i in range(len(a))]
            arrays.append(a)
        else:
            names.append(str(p))
            arrays.append(read_image(p, size, channels)[None])
    return names, np.concatenate(arrays)


def read_text_file(path: Path) -> str:
    """A file's text; bytes that are not UTF-8 become U+FFFD, as in training. Binary files are refused."""
    try:
        data = path.read_bytes()
    except PermissionError:
        raise unreadable(path) from None
    if b"\x00" in data:
        raise UserError(f"{path} is not a text file (it holds NUL bytes); give reviews as UTF-8 .txt files")
    return data.decode("utf-8", errors="replace")


def read_texts(specs: list[str], per_line: bool = False) -> tuple[list[str], list[str]]:
    """(one name per review, the reviews): each file (or each .txt in a folder) is one review, or with
    per_line each non-blank line is one, named FILE:LINE."""
    names, texts = [], []
    for p in expand_paths(specs, {".txt"}, "reviews (.txt files)"):
        content = read_text_file(p)
        if per_line:
            found = [(i, line) for i, line in enumerate(content.splitlines(), 1) if line.strip()]
            if not found:
                raise UserError(f"{p} holds no reviews (every line is blank); put one review per line")
            names += [f"{p}:{i}" for i, _ in found]
            texts += [line for _, line in found]
        elif not content.strip():
            raise UserError(f"{p} is empty; a review to classify needs some text")
        else:
            names.append(str(p))
            texts.append(content)
    return names, texts


def read_samples(specs: list[str], shape: tuple) -> tuple[list[str], np.ndarray]:
    """(one name per sample, the samples) of .npy files, each one sample of `shape` or (N, *shape); the dtype is
    checked by the Predictor."""
    names, arrays = [], []
    shape = tuple(shape)
    for p in expand_paths(specs, {".npy"}, ".npy arrays"):
        try:
            a = np.load(p, allow_pickle=False)
        except PermissionError:
            raise unreadable(p) from None
        except (ValueError, OSError) as e:
            raise UserError(f"{p} is not a readable .npy array ({str(e).splitlines()[0]})") from None
        if a.shape == shape:
            names.append(str(p))
            arrays.append(a[None])
        elif a.shape[1:] == shape and len(a):
            names += [f"{p}[{i}]" for i in range(len(a))]
            arrays.append(a)
        else:
            want = ", ".join(map(str, shape))
            raise UserError(f"{p} has shape {a.shape}; this net takes one sample ({want}) or several (N, {want})")
    return names, np.concatenate(arrays)
