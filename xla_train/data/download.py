"""Staged, checksummed downloads: a data set is either all there or not there at all.

The archive is fetched into a temporary folder beside the target, checked against its MD5 and extracted there,
and only then renamed into place, so a failed download never leaves a folder a later run would trust. Processes
sharing a data folder (pod hosts, two runs started together) download under an exclusive lock on a file in it, and
each checks again once it holds the lock, so the data set is fetched once and never replaced while another process
reads it (docs/reliability.md, "Downloads and caches").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from xla_train.errors import DataError


LOCK_FILE = ".xla_train-download.lock"


@contextlib.contextmanager
def download_lock(root: str, name: str):
    """An exclusive flock on root/LOCK_FILE; says so when it has to wait for another process's download."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    Path(root).mkdir(parents=True, exist_ok=True)
    with open(os.path.join(root, LOCK_FILE), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process's download of {name} into {root}", file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def staged_download(
    name: str, url: str, filename: str, md5: str, root: str, folder: str, present: Callable[[], bool] | None = None
) -> None:
    """Fetch `url` (MD5 `md5`), extract it, and move its `folder` to `root/folder`, unless `present()` says
    that another process has done so while this one waited for the lock."""
    with download_lock(root, name):
        if present is not None and present():
            return
        _staged_download(name, url, filename, md5, root, folder)


def _staged_download(name: str, url: str, filename: str, md5: str, root: str, folder: str) -> None:
    from torchvision.datasets.utils import calculate_md5, download_url, extract_archive

    Path(root).mkdir(parents=True, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".download-", dir=root)
    try:
        try:  # no md5 here: torchvision would raise "File not found or corrupted" for a bad checksum too
            download_url(url, stage, filename)
        except Exception as e:  # network errors come in many types; all mean the same to the user
            raise DataError(
                f"could not download {name} from {url} into {root} ({type(e).__name__}: {e}); "
                f"fetch {filename} by hand and extract it there"
            ) from None
        archive = os.path.join(stage, filename)
        if not os.path.isfile(archive):
            raise DataError(
                f"could not download {name} from {url}: no {filename} arrived; try again, or fetch "
                f"it by hand and extract it in {root}"
            )
        actual = calculate_md5(archive)
        if actual != md5:
            raise DataError(
                f"downloaded {filename} from {url}: checksum mismatch (expected MD5 {md5}, got "
                f"{actual}); the download is corrupt or incomplete, try again"
            )
        try:
            extract_archive(archive, stage)
        except Exception as e:
            raise DataError(
                f"{filename} is corrupt or truncated ({type(e).__name__}: {e}); delete it and retry"
            ) from None
        target = os.path.join(root, folder)
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(os.path.join(stage, folder), target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
