"""Data on the device (data.on_device) and uint8 batches: the same samples, the same arithmetic, decided in one line.

In-process checks here need no XLA: a resident batch is indices gathered on the
batch's device, a streamed one carries uint8 samples, and both go through the
same device-side preparation. The XLA runs that compare the two paths end to
end share test_steps_per_execution.py's fixture (one extra fit).
"""

import numpy as np
import pytest
import torch

from helpers import cli_env, run_cli
from xla_train.data.batching import PAD_LABEL
from xla_train.data.cifar10 import CIFAR10DataModule
from xla_train.data.image_base import PAD
from xla_train.errors import ConfigError
from xla_train.preprocess.images import crop_flip, images_to_tensor


@pytest.fixture
def dm(cifar_root, relaxed_cifar_checks):
    def make(on_device="auto", batch_size=16, augment=False):
        d = CIFAR10DataModule(
            data_dir=str(cifar_root),
            download=False,
            batch_size=batch_size,
            augment=augment,
            val_fraction=0.1,
            on_device=on_device,
        )
        d.setup()
        return d

    return make


def batches(d, split):
    loader = d.train_dataloader() if split == "train" else getattr(d, f"{split}_dataloader")()
    return list(loader)


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_resident_and_streamed_batches_hold_the_same_samples_in_the_same_order(dm, split):
    streamed, resident = dm(False), dm(True)
    resident.place(True, 1 << 30)
    assert resident.resident and not streamed.resident
    s_in, r_in = streamed.batch_inputs(), resident.batch_inputs()
    s_batches, r_batches = batches(streamed, split), batches(resident, split)
    assert len(s_batches) == len(r_batches) > 0
    padded = 0
    for sb, rb in zip(s_batches, r_batches):
        assert sb[0].dtype == torch.uint8 and sb[0].shape[1:] == (32, 32, 3)  # streamed as stored: a quarter of f32
        # resident: a training step sends its number in the epoch (its rows are on the device), evaluation its
        # indices
        assert rb[0].dtype == torch.int64 and rb[0].dim() == (0 if split == "train" else 1)
        xs, ys = s_in(sb, split, train=split == "train")
        xr, yr = r_in(rb, split, train=split == "train")
        assert torch.equal(ys, yr)
        padded += int((yr == PAD_LABEL).sum())
        keep = yr != PAD_LABEL
        assert torch.equal(xs[keep], xr[keep])
    n = len(streamed.arrays(split)[0])
    if split != "train":  # evaluation: every sample once, the last batch padded
        assert sum(int((b[1] != PAD_LABEL).sum()) for b in s_batches) == n
        assert padded == len(s_batches) * 16 - n


def test_resident_training_reads_each_epochs_order_on_the_device_and_resumes_mid_epoch(dm):
    """The order goes up once an epoch, and a step's number picks its rows: epoch 2 must not replay epoch 1, and a
    loader resumed after 3 batches must serve the 4th batch first."""
    streamed, resident = dm(False), dm(True)
    resident.place(True, 1 << 30)
    s_in, r_in = streamed.batch_inputs(), resident.batch_inputs()
    seen = []
    for epoch in (0, 1):
        s_loader, r_loader = streamed.train_dataloader(), resident.train_dataloader()
        s_loader.sampler.set_epoch(epoch)
        r_loader.sampler.set_epoch(epoch)
        for sb, rb in zip(s_loader, r_loader):
            assert torch.equal(s_in(sb, "train", True)[1], r_in(rb, "train", True)[1])
        (order,) = r_in.execution_inputs(torch.device("cpu"))
        assert order.shape == (16, len(r_loader))  # (batch rows, steps): split over devices as a batch is
        seen.append(order.clone())
    assert not torch.equal(seen[0], seen[1])
    resident.load_state_dict({"epoch": 1, "batches_done": 3})
    loader = resident.train_dataloader()
    loader.sampler.set_epoch(1)
    steps = [int(b[0]) for b in loader]
    assert steps[0] == 3 and steps[-1] == len(loader) - 1
    labels = torch.as_tensor(resident.arrays("train")[1])
    assert torch.equal(r_in((torch.tensor(3),), "train", True)[1], labels[seen[1][:, 3]])


def test_the_device_normalisation_is_what_serving_computes(dm):
    d = dm(False)
    raw = d.arrays("test")[0][:7]
    x = d.preparer()(d.transform(False)(raw), augment=False)
    assert x.dtype == torch.float32 and x.shape == (7, 3, 32, 32)
    torch.testing.assert_close(x, images_to_tensor(raw, d.mean, d.std), rtol=0, atol=0)
    torch.testing.assert_close(d.net_inputs(raw), x, rtol=0, atol=0)


def test_crop_flip_offsets_and_flips_fall_in_range_with_the_right_frequencies():
    """Each image is a distinct ramp, so its crop tells where it was taken and whether it was mirrored."""
    n, h, w = 4000, 8, 8
    ramp = (torch.arange(h)[:, None] * 16 + torch.arange(w)[None, :] + 1).to(torch.uint8)  # 1..120, never 0
    x = ramp[None, :, :, None].expand(n, h, w, 1).contiguous()
    torch.manual_seed(0)
    out = crop_flip(x, PAD)
    assert out.shape == x.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(x[0, :, :, 0], (PAD, PAD, PAD, PAD))
    found = []
    for img in out[:, :, :, 0]:
        hits = [
            (dy, dx, f)
            for dy in range(2 * PAD + 1)
            for dx in range(2 * PAD + 1)
            for f in (0, 1)
            if torch.equal(img, (lambda c: c.flip(1) if f else c)(padded[dy : dy + h, dx : dx + w]))
        ]
        assert hits, "a crop that is no window of the padded image"
        found.append(hits[0])
    dy, dx, f = map(np.array, zip(*found))
    assert dy.min() == dx.min() == 0 and dy.max() == dx.max() == 2 * PAD  # every offset reachable, none beyond
    counts = np.bincount(dy, minlength=2 * PAD + 1)
    assert counts.min() > n / (2 * PAD + 1) * 0.7 and counts.max() < n / (2 * PAD + 1) * 1.3  # uniform
    assert abs(f.mean() - 0.5) < 0.05  # mirrored half the time


def test_host_augmentation_draws_the_crops_it_drew_before_uint8_batches():
    """Streamed runs keep their augmentation: the torch crop_flip equals the earlier per-image numpy loop."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    torch.manual_seed(3)
    dy = torch.randint(0, 2 * PAD + 1, (64,)).numpy()
    dx = torch.randint(0, 2 * PAD + 1, (64,)).numpy()
    flip = torch.rand(64).numpy() < 0.5
    padded = np.pad(images, ((0, 0), (PAD, PAD), (PAD, PAD), (0, 0)))
    old = np.stack(
        [(lambda c: c[:, ::-1] if flip[i] else c)(padded[i, dy[i] : dy[i] + 32, dx[i] : dx[i] + 32]) for i in range(64)]
    )
    torch.manual_seed(3)
    assert np.array_equal(crop_flip(torch.from_numpy(images), PAD).numpy(), old)


def test_placement_is_decided_in_words(dm):
    assert dm("auto").place(True, 1 << 30).startswith("on the device")
    assert "over the" in dm("auto").place(True, 1000) and not dm("auto").resident
    d = dm("auto")
    assert "streams on this accelerator" in d.place(False, 1 << 30) and not d.resident
    assert dm(False).place(True, 1 << 30).endswith("(on_device=false)")
    with pytest.raises(ConfigError, match=r"data.on_device=true: the splits take .* over the 0.00095 MB budget"):
        dm(True).place(True, 1000)


def test_on_device_true_over_the_budget_is_one_line_and_writes_nothing(cifar_root, tmp_path):
    proc = run_cli(
        "fit",
        "recipe=cifar10",
        "accelerator=xla",
        "on_device=true",
        f"data_dir={cifar_root}",
        "download=false",
        "device_data_mb=0.5",
        cwd=tmp_path,
        check=False,
        env=cli_env(),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("xla_train: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "data.on_device=true: the splits take 0.82 MB on each device, over the 0.5 MB budget" in errors[0]
    assert not list(tmp_path.iterdir())  # refused before any run folder


@pytest.mark.parametrize("val_fraction", [0.1, 0.0])
def test_the_evaluation_splits_share_one_table_each_held_once(cifar_root, relaxed_cifar_checks, val_fraction):
    """Resident validation and test batches gather from one table of both splits (one program for both); with
    val_fraction=0 "val" is the test split, held once, and both read its rows."""
    d = CIFAR10DataModule(data_dir=str(cifar_root), download=False, batch_size=16, val_fraction=val_fraction)
    d.setup()
    d.place(True, 1 << 30)
    inputs = d.batch_inputs()
    (xv, yv, first_v), (xt, yt, first_t) = inputs.table("val", "cpu"), inputs.table("test", "cpu")
    assert xv is xt and yv is yt
    n_val, n_test = len(d.arrays("val")[0]), len(d.arrays("test")[0])
    distinct = n_test if val_fraction == 0 else n_val + n_test
    assert len(xv) == len(yv) == distinct
    assert (int(first_v), int(first_t)) == ((0, 0) if val_fraction == 0 else (0, n_val))
    assert first_t.shape == (1,)  # data, not a 0-dim scalar that XLA would make a constant of the program
    x_test, y_test = d.arrays("test")
    assert np.array_equal(xt[int(first_t) :].numpy(), x_test) and np.array_equal(yt[int(first_t) :].numpy(), y_test)
