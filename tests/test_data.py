import numpy as np
import pytest

from conftest import CLASSES
from xla_train.data.cifar10 import CIFAR10DataModule
from xla_train.data.digits import DigitsDataModule, load_digits_rgb32
from xla_train.errors import DataError


def test_cifar10_reads_the_real_file_layout(cifar_root, relaxed_cifar_checks):
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False, batch_size=16)
    x, y = dm.arrays("train")
    assert x.shape == (200, 32, 32, 3) and x.dtype == np.uint8
    assert dm.arrays("test")[0].shape == (80, 32, 32, 3)
    assert dm.labels == CLASSES
    xb, yb = next(iter(dm.train_dataloader()))
    assert xb.shape == (16, 3, 32, 32) and yb.shape == (16,)
    info = dm.inference_info()
    assert info["labels"] == CLASSES and info["image_size"] == 32 and len(info["mean"]) == 3


def test_cifar10_eval_loader_pads_the_last_batch(cifar_root, relaxed_cifar_checks):
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False, batch_size=24)
    batches = list(dm.val_dataloader())
    assert {tuple(b[0].shape) for b in batches} == {(24, 3, 32, 32)}
    labels = np.concatenate([b[1].numpy() for b in batches])
    assert (labels >= 0).sum() == 80 and len(labels) == 96


def test_missing_cifar10_names_the_path_and_the_archive(tmp_path):
    dm = CIFAR10DataModule(data_dir=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(DataError, match=r"nowhere.*cifar-10-python\.tar\.gz"):
        dm.setup()


def test_cifar10_failing_its_checksums_is_refused(cifar_root):
    # the fixture's files are not the real ones, so the real MD5 check must reject them
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False)
    with pytest.raises(DataError, match="fails its checksums"):
        dm.setup()


def test_corrupt_cifar10_file_is_a_clear_error(tmp_path, relaxed_cifar_checks):
    from conftest import write_cifar10

    root = write_cifar10(tmp_path)
    (root / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="cannot be read"):
        CIFAR10DataModule(data_dir=str(root), download=False).setup()


def test_failed_download_leaves_no_partial_folder(tmp_path, monkeypatch):
    import torchvision.datasets.utils as tv_utils

    def fail(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(tv_utils, "download_url", fail)
    dm = CIFAR10DataModule(data_dir=str(tmp_path), download=True)
    with pytest.raises(DataError, match="could not download"):
        dm.setup()
    assert list(tmp_path.iterdir()) == []


def test_digits_are_real_32x32_rgb_images():
    x, y = load_digits_rgb32()
    assert x.shape == (1797, 32, 32, 3) and x.dtype == np.uint8
    assert set(np.unique(y)) == set(range(10))
    assert x.max() > 200 and (x[..., 0] == x[..., 2]).all()


def test_digits_splits_are_disjoint_and_stratified():
    dm = DigitsDataModule()
    sizes = {s: len(dm.arrays(s)[0]) for s in ("train", "val", "test")}
    assert sizes == {"train": 1293, "val": 144, "test": 360}
    for split in sizes:  # stratified: every class keeps its share (about 10%) in every split
        counts = np.bincount(dm.arrays(split)[1], minlength=10) / sizes[split]
        assert counts.min() > 0.08 and counts.max() < 0.12
    assert set(np.unique(dm.arrays("test")[1])) == set(range(10))


def test_truncated_archive_is_refused_and_leaves_no_partial_folder(tmp_path, monkeypatch):
    import io
    import tarfile

    import torchvision.datasets.utils as tv_utils

    import hashlib

    from torchvision.datasets import CIFAR10

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"x" * 100_000
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    truncated = buf.getvalue()[:200]

    def truncated_download(url, root, filename, md5=None):
        with open(f"{root}/{filename}", "wb") as f:
            f.write(truncated)

    monkeypatch.setattr(tv_utils, "download_url", truncated_download)
    # an archive truncated at its source passes the checksum and fails only when extracted
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(truncated).hexdigest())
    with pytest.raises(DataError, match="corrupt or truncated"):
        CIFAR10DataModule(data_dir=str(tmp_path), download=True).setup()
    assert list(tmp_path.iterdir()) == []


def test_a_folder_missing_the_test_split_is_named(tmp_path, relaxed_cifar_checks):
    from conftest import write_cifar10

    root = write_cifar10(tmp_path)
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DataError, match="cifar-10-batches-py is incomplete"):
        CIFAR10DataModule(data_dir=str(root), download=False).setup()


def test_a_corrupt_download_says_checksum_mismatch_with_both_md5s(tmp_path, monkeypatch):
    """A real HTTP download from 127.0.0.1 of an archive whose bytes are not CIFAR-10's."""
    import functools
    import hashlib
    import http.server
    import threading

    from torchvision.datasets import CIFAR10

    served = tmp_path / "served"
    served.mkdir()
    (served / CIFAR10.filename).write_bytes(b"not the real archive" * 1000)
    actual = hashlib.md5((served / CIFAR10.filename).read_bytes()).hexdigest()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
            monkeypatch.delenv(var, raising=False)
        url = f"http://127.0.0.1:{server.server_address[1]}/{CIFAR10.filename}"
        monkeypatch.setattr(CIFAR10, "url", url)
        root = tmp_path / "data"
        with pytest.raises(DataError) as e:
            CIFAR10DataModule(data_dir=str(root), download=True).setup()
    finally:
        server.shutdown()
        server.server_close()
    assert str(e.value) == (f"downloaded {CIFAR10.filename} from {url}: checksum mismatch (expected MD5 "
                            f"{CIFAR10.tgz_md5}, got {actual}); the download is corrupt or incomplete, try again")
    assert list(root.iterdir()) == []  # the staged download is gone
