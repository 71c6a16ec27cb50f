"""Inputs to predict that cannot be read: one line naming the file, never a traceback."""

import builtins
import io
import os

import numpy as np
import pytest
from PIL import Image

from helpers import save_checkpoint
from xla_train.cli.main import main
from xla_train.errors import UserError
from xla_train.serve.inputs import read_images, read_texts


def test_an_image_over_pils_decompression_bomb_limit_is_one_line(tmp_path, monkeypatch):
    """A real PNG, with PIL's limit lowered so that a small file is over it (a real bomb is gigapixels)."""
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # PIL refuses above twice this: 4096 > 2000
    with pytest.raises(UserError) as e:
        read_images([str(tmp_path / "big.png")], 32)
    message = str(e.value)
    assert "\n" not in message and "big.png is too large to decode" in message
    assert "4096 pixels" in message and "decompression-bomb limit" in message and "downscale it" in message


def _unreadable(monkeypatch, path):
    """chmod 000 where it stops reads; as root it does not, so refuse the open as the kernel would."""
    os.chmod(path, 0)
    if os.geteuid() != 0:
        return
    real_open = io.open

    def denying_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.fspath(file) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denying_open)
    monkeypatch.setattr(io, "open", denying_open)


@pytest.mark.parametrize(
    "name,write",
    [
        ("x.png", lambda p: Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(p)),
        ("x.npy", lambda p: np.save(p, np.zeros((1, 8, 8, 3), np.uint8))),
        ("x.txt", lambda p: p.write_text("a fine film")),
    ],
)
def test_a_file_without_read_permission_is_one_line(tmp_path, monkeypatch, capsys, name, write):
    path = tmp_path / name
    write(path)
    _unreadable(monkeypatch, path)
    with pytest.raises(UserError) as e:
        if name.endswith(".txt"):
            read_texts([str(path)])
        else:
            read_images([str(path)], 32)
    assert str(e.value) == (
        f"{path} cannot be read: permission denied; make it readable (chmod +r) or copy it somewhere you can read"
    )


def test_predict_on_an_unreadable_file_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    """Through the command, with a real (untrained) checkpoint: predict loads it before it reads the inputs."""
    from xla_train.models import CifarCNN

    info = {"kind": "image", "labels": list("0123456789"), "image_size": 32, "mean": [0.5] * 3, "std": [0.25] * 3}
    save_checkpoint(tmp_path / "m.ckpt", CifarCNN(), {}, info)
    path = tmp_path / "x.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    _unreadable(monkeypatch, path)
    assert main(["predict", f"ckpt={tmp_path / 'm.ckpt'}", f"inputs={path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"xla_train: error: {path} cannot be read: permission denied; make it readable (chmod +r) or "
        f"copy it somewhere you can read"
    ]
