import subprocess
import sys

import torch

from xla_train.models import NETS, CifarCNN
from xla_train.models.reference import NetRef, build


def test_cnn_has_the_keras_parameter_count():
    net = CifarCNN()
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == 1_676_912


def test_cnn_maps_cifar_images_to_class_logits():
    net = CifarCNN(num_classes=10).eval()
    assert net(torch.randn(3, 3, 32, 32)).shape == (3, 10)


def test_a_builtin_net_is_named_by_its_key_with_every_init_argument():
    block = NetRef.of(CifarCNN, {"dropout": 0.3}).block()
    assert block == {"format": 1, "arch": "cnn", "config": {"num_classes": 10, "dropout": 0.3, "dense_dropout": 0.5}}
    again = build(NetRef.from_block(block, "x.ckpt"), "x.ckpt")
    assert isinstance(again, CifarCNN) and again.features[6].p == 0.3
    assert set(NETS) >= {"cnn"}


def test_models_and_inference_import_neither_lightning_nor_torch_xla():
    code = (
        "import sys, xla_train, xla_train.models, xla_train.serve.predictor, xla_train.cli.predict, xla_train.cli.export;"
        "bad = [m for m in ('lightning', 'pytorch_lightning', 'torch_xla') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
