import numpy as np
import pytest
import torch

from helpers import CLASSES
from xla_train.data.cifar10 import CIFAR10DataModule
from xla_train.data.digits import DigitsDataModule, load_digits_rgb32
from xla_train.errors import DataError


def data_left(root) -> list:
    """What a failed download left in its folder, beside the lock file that serialises downloads (kept on
    purpose: deleting a lock file others may be waiting on would let two processes hold "the" lock)."""
    from xla_train.data.download import LOCK_FILE

    return sorted(p.name for p in root.iterdir() if p.name != LOCK_FILE)


def test_cifar10_reads_the_real_file_layout(cifar_root, relaxed_cifar_checks):
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False, batch_size=16)
    x, y = dm.arrays("train")  # 200 training images, 20 of them held out for validation (val_fraction=0.1)
    assert x.shape == (180, 32, 32, 3) and x.dtype == np.uint8
    assert dm.arrays("test")[0].shape == (80, 32, 32, 3)
    assert dm.labels == CLASSES
    xb, yb = next(iter(dm.train_dataloader()))
    assert xb.shape == (16, 32, 32, 3) and xb.dtype == torch.uint8 and yb.shape == (16,)  # sent as stored
    info = dm.inference_info()
    assert info["labels"] == CLASSES and info["image_size"] == 32 and len(info["mean"]) == 3


def test_cifar10_eval_loader_pads_the_last_batch(cifar_root, relaxed_cifar_checks):
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False, batch_size=24)
    batches = list(dm.test_dataloader())
    assert {tuple(b[0].shape) for b in batches} == {(24, 32, 32, 3)}
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
    from helpers import write_cifar10

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
    assert data_left(tmp_path) == []


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
    assert data_left(tmp_path) == []


def test_a_folder_missing_the_test_split_is_named(tmp_path, relaxed_cifar_checks):
    from helpers import write_cifar10

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
    assert str(e.value) == (
        f"downloaded {CIFAR10.filename} from {url}: checksum mismatch (expected MD5 "
        f"{CIFAR10.tgz_md5}, got {actual}); the download is corrupt or incomplete, try again"
    )
    assert data_left(root) == []  # the staged download is gone


# --- validation held out of the training split (val_fraction) -------------------------------------------------


def _rows(x: np.ndarray) -> set[bytes]:
    return {r.tobytes() for r in x.reshape(len(x), -1)}


def test_validation_is_carved_out_of_train_stratified_and_the_test_split_is_untouched(cifar_root, relaxed_cifar_checks):
    from xla_train.data.cifar10 import load_cifar10

    raw = load_cifar10(str(cifar_root), download=False)
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False)
    (xt, yt), (xv, yv), (xs, ys) = (dm.arrays(s) for s in ("train", "val", "test"))
    assert (len(xt), len(xv)) == (180, 20)  # 10% of the 200 training images
    # disjoint, and together exactly the training split: no image lost, none shared
    all_train = np.concatenate([xt, xv]).reshape(200, -1)
    order = np.lexsort(all_train.T[::-1])
    raw_x = raw["train"][0].reshape(200, -1)
    assert np.array_equal(all_train[order], raw_x[np.lexsort(raw_x.T[::-1])])
    assert not _rows(xt) & _rows(xv)
    assert np.array_equal(np.sort(np.concatenate([yt, yv])), np.sort(raw["train"][1]))
    # stratified: each class's share of validation is its share of train, to within one image
    share = np.bincount(raw["train"][1], minlength=10) / 200
    assert np.abs(np.bincount(yv, minlength=10) - share * 20).max() <= 1
    # the test split is the data set's own, unchanged and in order, and validation holds none of it
    assert np.array_equal(xs, raw["test"][0]) and np.array_equal(ys, raw["test"][1])
    assert not _rows(xv) & _rows(xs)
    assert dm.test_is_held_out


def test_the_carved_split_is_fixed_whatever_the_run_seed_or_global_rng(cifar_root, relaxed_cifar_checks):
    import random

    import torch

    def val_of(**kw):
        return CIFAR10DataModule(data_dir=str(cifar_root), download=False, **kw).arrays("val")

    first = val_of(seed=1)
    np.random.seed(123), random.seed(123), torch.manual_seed(123)
    again = val_of(seed=7)
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    other = val_of(split_seed=1)
    assert _rows(other[0]) != _rows(first[0])


def test_carve_validation_sizes_of_the_real_data_sets():
    from xla_train.data.base import carve_validation

    rng = np.random.default_rng(0)
    for n, classes, want in ((50_000, 10, 5_000), (25_000, 2, 2_500)):
        labels = np.repeat(np.arange(classes), n // classes)
        rng.shuffle(labels)
        fit, val = carve_validation(labels, 0.1, 0)
        assert len(val) == want and len(fit) == n - want and not set(fit) & set(val)
        assert (np.bincount(labels[val]) == want // classes).all()  # balanced classes stay balanced


def test_val_fraction_zero_validates_on_the_test_split_as_the_tutorials_did(cifar_root, relaxed_cifar_checks):
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False, val_fraction=0)
    assert len(dm.arrays("train")[0]) == 200
    assert np.array_equal(dm.arrays("val")[0], dm.arrays("test")[0])
    assert not dm.test_is_held_out


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2.0, float("nan")])
def test_a_val_fraction_outside_0_1_is_refused(bad):
    from xla_train.errors import ConfigError

    with pytest.raises(ConfigError, match=r"val_fraction=.* must be in \[0, 1\)"):
        CIFAR10DataModule(val_fraction=bad)


def test_too_few_samples_for_a_stratified_validation_set_is_one_line(cifar_root, relaxed_cifar_checks):
    from xla_train.errors import ConfigError

    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False, val_fraction=0.01)  # 2 images, 10 classes
    with pytest.raises(ConfigError, match="cannot hold out a stratified validation set from 200"):
        dm.setup()
