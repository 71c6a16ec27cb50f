"""The CIFAR ResNet recipe: the net the paper describes, augmentation only where it belongs,
one compile per graph on XLA, and a checkpoint that serves on the CPU at any batch size."""

import numpy as np
import pytest
import torch
import yaml

from helpers import epoch_value, metrics_rows, run_cli
from xla_train.cli.main import main
from xla_train.errors import ConfigError
from xla_train.models import NETS, CifarResNet
from xla_train.models.reference import NetRef, build

# He et al. 2015, Table 6: 0.27 M, 0.46 M, 0.66 M, 0.85 M parameters with option A shortcuts.
PAPER_PARAMS = {20: 269_722, 32: 464_154, 44: 658_586, 56: 853_018}


def n_params(net) -> int:
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


@pytest.mark.parametrize("depth", sorted(PAPER_PARAMS))
def test_resnet_depths_have_the_papers_parameter_counts(depth):
    net = CifarResNet(depth=depth)
    assert n_params(net) == PAPER_PARAMS[depth]
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) + 1 == depth  # every weighted layer but the classifier is a 3x3 convolution


def test_resnet20_maps_images_through_three_stages_to_logits():
    net = CifarResNet(depth=20, num_classes=7).eval()
    x = torch.randn(3, 3, 32, 32)
    stages = {}
    for i in (0, 3, 6):  # first block of each stage
        net.blocks[i].register_forward_hook(lambda m, inp, out, i=i: stages.__setitem__(i, out.shape))
    assert net(x).shape == (3, 7)
    assert stages == {0: (3, 16, 32, 32), 3: (3, 32, 16, 16), 6: (3, 64, 8, 8)}


def test_option_b_shortcuts_add_only_the_two_projection_layers():
    a, b = CifarResNet(20, shortcut="A"), CifarResNet(20, shortcut="B")
    # two 1x1 projections (16->32, 32->64) with their BatchNorms
    assert n_params(b) - n_params(a) == (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64)
    assert b.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_resnet_rebuilds_from_its_recorded_init_arguments():
    args = {"depth": 32, "num_classes": 5, "shortcut": "B"}
    net = CifarResNet(**args)
    ref = NetRef.from_block(NetRef.of(CifarResNet, args).block(), "x.ckpt")
    again = build(ref, "x.ckpt")
    assert NETS["resnet"] is CifarResNet and ref.init_args == args and ref.key == "resnet"
    again.load_state_dict(net.state_dict(), strict=True)


@pytest.mark.parametrize("depth", [21, 19, 2, 0, -4, "20", 20.0, True])
def test_a_depth_that_is_not_6n_plus_2_is_a_config_error(depth):
    with pytest.raises(ConfigError, match=r"is not a CIFAR ResNet depth; it must be 6n\+2"):
        CifarResNet(depth=depth)


def test_bad_depth_on_the_command_line_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, cifar_root):
    monkeypatch.chdir(tmp_path)
    assert (
        main(["recipe=cifar10_resnet", "depth=21", "accelerator=cpu", f"data_dir={cifar_root}", "download=false"]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1].startswith("xla_train: error: depth=21 is not a CIFAR ResNet depth"), err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


# --- augmentation --------------------------------------------------------------------------------


def crops_and_flips(image: np.ndarray, pad: int = 4) -> np.ndarray:
    """Every image the augmentation may produce from one uint8 HWC image."""
    h, w, _ = image.shape
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)))
    crops = [padded[dy : dy + h, dx : dx + w] for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)]
    return np.stack(crops + [c[:, ::-1] for c in crops])


def test_augmentation_changes_training_batches_only(cifar_root, relaxed_cifar_checks):
    from xla_train.data.cifar10 import CIFAR10DataModule

    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False, batch_size=32, augment=True)
    train = dm.train_dataloader()
    first, second = list(train), list(train)  # same epoch, so the same indices in the same order
    assert len(first) == len(second) == 180 // 32  # 200 images, 20 held out for validation
    for (x1, y1), (x2, y2) in zip(first, second):
        assert x1.shape == x2.shape == (32, 32, 32, 3) and x1.dtype == torch.uint8  # normalised on the device
        assert torch.equal(y1, y2)
        assert not torch.equal(x1, x2)

    # each augmented image is one of the 4-pixel-padded crops of its source, or its mirror image
    inputs, _ = dm.arrays("train")
    plain = dm.transform(train=False)
    indices = next(iter(train.sampler))
    for k in range(4):
        candidates = plain(crops_and_flips(inputs[indices[k]]))
        assert any(torch.equal(first[0][0][k], c) for c in candidates), k

    val1, val2 = list(dm.val_dataloader()), list(dm.val_dataloader())
    val_inputs, _ = dm.arrays("val")
    n = min(32, len(val_inputs))  # the fixture's 20 validation images: one batch, padded to 32
    assert torch.equal(val1[0][0][:n], plain(val_inputs[:n]))
    for (x1, y1), (x2, y2) in zip(val1, val2):
        assert x1.shape == (32, 32, 32, 3) and torch.equal(x1, x2) and torch.equal(y1, y2)
    test_inputs, _ = dm.arrays("test")  # evaluation never augments, on either held-out split
    assert all(
        torch.equal(x, plain(test_inputs[32 * i : 32 * (i + 1)]))
        for i, (x, _) in enumerate(dm.test_dataloader())
        if 32 * (i + 1) <= len(test_inputs)
    )


def test_without_augment_training_batches_repeat_exactly(cifar_root, relaxed_cifar_checks):
    from xla_train.data.cifar10 import CIFAR10DataModule

    train = CIFAR10DataModule(data_dir=str(cifar_root), download=False, batch_size=32).train_dataloader()
    assert all(torch.equal(a[0], b[0]) for a, b in zip(train, train))


# --- the recipe, end to end on XLA:CPU -----------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_run(cifar_root, tmp_path_factory):
    """Two epochs of five steps each: SGD's first step (no momentum buffer yet) and the steady step
    are two training graphs, both compiled in epoch 1."""
    work = tmp_path_factory.mktemp("resnet_run")
    proc = run_cli(
        *"fit recipe=cifar10_resnet accelerator=xla devices=1 epochs=2 batch_size=32 download=false".split(),
        "test_after_fit=false",
        f"data_dir={cifar_root}",
        cwd=work,
    )
    return work / "runs" / "cifar10_resnet" / "version_0", proc


def test_resnet_recipe_trains_on_xla_and_never_recompiles_after_epoch_one(resnet_run):
    run, proc = resnet_run
    config = yaml.safe_load((run / "config.yaml").read_text())
    model, data = config["model"], config["data"]["init_args"]
    assert model["net"]["class_path"].endswith("CifarResNet") and model["net"]["init_args"]["depth"] == 20
    assert (model["optimizer"], model["momentum"], model["weight_decay"], model["schedule"]) == (
        "sgd",
        0.9,
        0.0005,
        "cosine",
    )
    assert data["augment"] is True
    rows = metrics_rows(run)
    compiles = epoch_value(rows, "xla_compiles")
    assert compiles[0] >= 1 and compiles[1] == 0, f"epoch 2 recompiled: {compiles}"
    assert len(epoch_value(rows, "val_acc")) == 2 and all(np.isfinite(list(epoch_value(rows, "train_loss").values())))
    assert "epoch 2  " in proc.stdout and "compile 0.0 s (0 graphs)" in proc.stdout


def test_resnet_checkpoint_predicts_on_cpu_alike_at_batch_sizes_1_and_64(resnet_run, cifar_root, relaxed_cifar_checks):
    from xla_train import load_for_inference
    from xla_train.data.cifar10 import CIFAR10DataModule

    run, _ = resnet_run
    predictor = load_for_inference(run / "checkpoints" / "last.ckpt")
    assert isinstance(predictor.model, CifarResNet) and predictor.init_args["depth"] == 20
    assert not predictor.model.training
    dm = CIFAR10DataModule(data_dir=str(cifar_root), download=False)
    test_images, _ = dm.arrays("test")
    one = predictor.probabilities(test_images[:64], batch_size=1)
    many = predictor.probabilities(test_images[:64], batch_size=64)
    assert one.shape == many.shape == (64, 10)
    torch.testing.assert_close(one, many, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(many.sum(1), torch.ones(64))
    images, labels = dm.arrays("val")  # the fixture's 20 held-out validation images
    # The CPU serves the accuracy XLA measured on the same split at the same (last) epoch.
    acc = (predictor.probabilities(images).argmax(1).numpy() == np.asarray(labels)).mean()
    assert acc == pytest.approx(epoch_value(metrics_rows(run), "val_acc")[1], abs=1e-6)
