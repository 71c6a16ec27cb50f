"""cli/keys.py: every command outside fit reads its key=value pairs one way, from a typed signature."""

import pytest

from xla_train import api
from xla_train.cli import devices, export, predict
from xla_train.cli.main import main, split_argv
from xla_train.errors import ConfigError


def parsed(argv):
    command, pairs, flags = split_argv(argv)
    return {"predict": predict, "export": export, "devices": devices}[command].parse(pairs, flags)


def test_each_key_is_typed_by_its_signature_and_a_text_key_is_taken_as_written():
    fn, kwargs = parsed(["predict", "ckpt=m.ckpt", "text=null", "batch_size=16", "--probs"])
    assert fn is predict.predict
    assert kwargs == {
        "ckpt": "m.ckpt",
        "inputs": "",
        "text": "null",
        "batch_size": 16,
        "probs": True,
        "lines": False,
        "net": None,
        "net_args": None,
    }
    for review in ("#1 film of the year", "~", "Verdict: great", "[1, 2]", "true"):  # YAML would read these
        assert parsed(["predict", "ckpt=m.ckpt", f"text={review}"])[1]["text"] == review
    fn, kwargs = parsed(["predict", "ckpt=m.ckpt", "split=val", "devices=4", "probs=true"])
    assert fn is predict.predict_split and kwargs["devices"] == 4 and kwargs["probs"] is True
    assert kwargs["batch_size"] is None and kwargs["data_dir"] is None
    assert parsed(["predict", "ckpt=m.ckpt", "split=val"])[1]["devices"] == "auto"
    assert parsed(["export", "ckpt=m.ckpt", "format=pt2"])[1] == {
        "ckpt": "m.ckpt",
        "format": "pt2",
        "out": None,
        "net": None,
        "net_args": None,
    }
    given = parsed(["export", "ckpt=m.ckpt", "format=pt2", "net=a.B", "model.net.init_args.width=64"])[1]
    assert given["net"] == "a.B" and given["net_args"] == {"width": 64}  # fit's spelling of a net's arguments
    assert parsed(["devices"])[1] == {"accelerator": "xla", "runtime": "auto"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["predict", "ckpt=m.ckpt", "inptus=a.png", "inputz=b.png"],
            "predict takes ckpt=, inputs=, text=, batch_size=, --probs, --lines, net=, net_args=; not inptus, inputz; "
            "did you mean inputs?",  # each candidate once
        ),
        (
            ["predict", "ckpt=m.ckpt", "inputs=a.png", "--prob"],
            "predict does not know --prob; its switches are --probs",
        ),
        (["predict", "ckpt=m.ckpt", "inputs=a.png", "batch_size=0"], "batch_size: not of type PositiveInt"),
        (["predict", "inputs=a.png"], "predict needs ckpt="),
        (["predict", "ckpt=", "inputs=a.png"], "predict needs ckpt="),
        (["predict", "ckpt=m.ckpt", "split=val", "lines=true"], "predict with split= takes ckpt=, split="),
        (
            ["predict", "ckpt=m.ckpt", "split=val", "devices=0"],
            "devices: 0 is out of range (does not conform to restriction v>0)",
        ),
        (["export", "ckpt=m.ckpt", "format=onnx", "--fast"], "export does not know --fast; it takes key=value"),
        (
            ["devices", "accelerater=tpu"],
            "devices takes accelerator=, runtime=; not accelerater; did you mean accelerator?",
        ),
    ],
)
def test_a_bad_key_or_value_is_one_line_before_anything_runs(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        parsed(argv)
    assert message in str(e.value) and "\n" not in str(e.value), e.value
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"xla_train: error: {e.value}\n"
    assert list(tmp_path.iterdir()) == []


def test_the_python_api_reads_its_settings_through_the_same_signature(tmp_path):
    with pytest.raises(
        ConfigError, match=r"predict_split takes ckpt=, split=, .*; not acelerator; did you mean accelerator\?"
    ):
        api.predict_split(tmp_path / "m.ckpt", acelerator="cpu")
    with pytest.raises(ConfigError, match="batch_size: 0 is out of range"):
        api.predict_split(tmp_path / "m.ckpt", batch_size=0)
