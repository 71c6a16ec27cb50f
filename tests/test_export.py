"""`export`: ONNX and pt2 graphs that predict what load_for_inference predicts, atomic, bad input refused."""

import errno
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from xla_train.cli.main import main
from xla_train.models import NETS as BUILTIN
from xla_train.preprocess import text
from xla_train.serve import export as export_module
from xla_train.serve.export import OPSET, export
from xla_train.serve.predictor import load_for_inference

from helpers import SCRIPTS, require, save_checkpoint


def onnx_packages():
    """onnx and onnxruntime (the test extra's): a test that needs them is skipped where they are missing, and
    fails under CI=true. The pt2 tests, the refusals and the atomic writes run either way."""
    return require("onnx"), require("onnxruntime")


IMAGE_INFO = {
    "kind": "image",
    "labels": [f"class{i}" for i in range(10)],
    "image_size": 32,
    "mean": [0.4914, 0.4822, 0.4465],
    "std": [0.2470, 0.2435, 0.2616],
}
WORDS = "a wonderful superb film the plot was awful boring and tedious actor scene story".split()
MAXLEN = 40
# Small versions of each net that keep every kind of layer: the CNN as it is, a ResNet of one block per stage.
NETS = {"cnn": {}, "resnet": {"depth": 8}, "lstm": {"vocab_size": 100, "embed_dim": 16, "hidden_size": 8}}
# The last layer's weights scaled so that the random nets' probabilities differ from input to input by far more
# than the parity tolerance (unscaled, the CNN's spread was 0.002 against an atol of 1e-4).
LOGIT_SCALE = {"cnn": 100.0, "resnet": 10.0, "lstm": 30.0}
ATOL = 1e-4


def write_checkpoint(path: Path, arch: str) -> Path:
    """A checkpoint as fit writes it, with random weights and BatchNorm statistics far from the identity."""
    torch.manual_seed(0)
    net = BUILTIN[arch](**NETS[arch])
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.2, 0.2)
        [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1].weight.mul_(LOGIT_SCALE[arch])
    if arch == "lstm":
        tok = text.build_tokenizer([" ".join(WORDS)] * 3, 100)
        info = {"kind": "text", "labels": ["neg", "pos"], "maxlen": MAXLEN, "tokenizer": text.tokenizer_to_json(tok)}
    else:
        info = IMAGE_INFO
    return save_checkpoint(path, net, NETS[arch], info)


def inputs(arch: str, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if arch != "lstm":
        return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    ids = np.zeros((n, MAXLEN), np.int64)
    for row, length in zip(ids, rng.integers(1, MAXLEN + 1, n)):  # 1 to 40 real tokens, padded at the front
        row[MAXLEN - length :] = rng.integers(1, 100, length)
    return ids


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{arch: (checkpoint, {format: exported file})}, each exported once beside its checkpoint, as the CLI does."""
    result = {}
    for arch in NETS:
        folder = tmp_path_factory.mktemp(arch)
        ckpt = write_checkpoint(folder / "last.ckpt", arch)
        result[arch] = ckpt, {"pt2": export(ckpt, "pt2")}
    return result


@pytest.fixture(scope="module")
def exported_onnx(exported):
    """The same checkpoints exported to ONNX: {arch: (checkpoint, onnx file)}."""
    onnx_packages()
    return {arch: (ckpt, export(ckpt, "onnx")) for arch, (ckpt, _) in exported.items()}


def assert_predicts_like_the_checkpoint(ckpt, run, fmt: str, arch: str) -> None:
    predictor = load_for_inference(ckpt)
    for n in (1, 7, 64):
        x = inputs(arch, n, seed=n)
        expected = predictor.probabilities(x).numpy()
        assert expected.shape == (n, len(predictor.labels))
        np.testing.assert_allclose(run(x), expected, atol=ATOL, rtol=0, err_msg=f"{fmt}, batch {n}")
    assert np.ptp(expected, axis=0).max() > 1000 * ATOL  # outputs that vary far more than the tolerance


@pytest.mark.parametrize("arch", list(NETS))
def test_pt2_predicts_what_load_for_inference_predicts(exported, arch):
    ckpt, files = exported[arch]
    assert files == {"pt2": ckpt.with_name("last.pt2")}
    program = torch.export.load(files["pt2"]).module()

    def run(x):
        with torch.no_grad():
            return program(torch.from_numpy(x)).numpy()

    assert_predicts_like_the_checkpoint(ckpt, run, "pt2", arch)


@pytest.mark.parametrize("arch", list(NETS))
def test_onnx_predicts_what_load_for_inference_predicts(exported_onnx, arch):
    _, ort = onnx_packages()
    ckpt, path = exported_onnx[arch]
    assert path == ckpt.with_name("last.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert_predicts_like_the_checkpoint(
        ckpt, lambda x: session.run(None, {session.get_inputs()[0].name: x})[0], "onnx", arch
    )


def test_the_onnx_file_states_its_opset_input_and_labels(exported_onnx):
    onnx, _ = onnx_packages()
    for arch, (ckpt, path) in exported_onnx.items():
        model = onnx.load(str(path))
        assert {o.domain: o.version for o in model.opset_import}[""] == OPSET
        meta = {p.key: p.value for p in model.metadata_props}
        assert meta["opset"] == str(OPSET) and json.loads(meta["labels"]) == load_for_inference(ckpt).labels
        (inp,) = model.graph.input
        dims = inp.type.tensor_type.shape.dim
        assert dims[0].dim_param and not dims[0].dim_value  # a dynamic batch
        if arch == "lstm":
            assert inp.type.tensor_type.elem_type == onnx.TensorProto.INT64 and dims[1].dim_value == MAXLEN
            assert meta["maxlen"] == str(MAXLEN)
            ops = {node.op_type for node in model.graph.node}
            assert "LSTM" in ops and not {"Loop", "Scan", "SequenceConstruct"} & ops  # one kernel, nothing packed
        else:
            assert inp.type.tensor_type.elem_type == onnx.TensorProto.UINT8
            assert [d.dim_value for d in dims[1:]] == [32, 32, 3]


def test_a_text_export_writes_the_checkpoint_tokenizer_beside_the_model(exported_onnx):
    _, ort = onnx_packages()
    ckpt, model = exported_onnx["lstm"]
    path = model.with_name("tokenizer.json")
    assert path.read_text() == load_for_inference(ckpt).info["tokenizer"]  # one file serves both formats
    tok = text.tokenizer_from_json(path.read_text())
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    reviews = ["A wonderful, superb film", "the plot was awful and tedious"]
    (probs,) = session.run(None, {"ids": text.encode(tok, reviews, MAXLEN)})
    np.testing.assert_allclose(probs, load_for_inference(ckpt).probabilities(reviews).numpy(), atol=ATOL, rtol=0)


def test_the_pt2_files_run_without_xla_train_or_lightning(exported, tmp_path):
    args = []
    for arch, (_, files) in exported.items():
        np.save(tmp_path / f"{arch}.npy", inputs(arch, 5))
        args += [str(files["pt2"]), str(tmp_path / f"{arch}.npy"), str(tmp_path / f"{arch}_out.npy")]
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "export_pt2_alone.py"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for arch, (ckpt, _) in exported.items():
        expected = load_for_inference(ckpt).probabilities(np.load(tmp_path / f"{arch}.npy")).numpy()
        np.testing.assert_allclose(np.load(tmp_path / f"{arch}_out.npy"), expected, atol=1e-4, rtol=0, err_msg=arch)


# --- the command: never overwrites, never leaves a partial file, one line for bad input ---------------------------


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip().splitlines()


def test_the_command_writes_beside_the_checkpoint_and_never_overwrites(tmp_path, capsys):
    ckpt = write_checkpoint(tmp_path / "best.ckpt", "lstm")
    code = (
        "import sys; from xla_train.cli.main import main; rc = main(sys.argv[1:]);"
        "assert 'torch_xla' not in sys.modules and 'lightning' not in sys.modules; sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "export", f"ckpt={ckpt}", "format=pt2"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"wrote {tmp_path / 'best.pt2'}" and (tmp_path / "tokenizer.json").is_file()
    before = (tmp_path / "best.pt2").read_bytes()
    code, out, err = run(["export", f"ckpt={ckpt}", "format=pt2"], capsys)
    assert code == 2 and len(err) == 1 and "already exists" in err[0] and "best.pt2" in err[0]
    assert (tmp_path / "best.pt2").read_bytes() == before
    (tmp_path / "tokenizer.json").write_text("{}")  # someone else's tokenizer: not ours to replace
    code, out, err = run(["export", f"ckpt={ckpt}", "format=pt2", f"out={tmp_path / 'other.pt2'}"], capsys)
    assert code == 2 and len(err) == 1 and "tokenizer.json already exists" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "best.pt2", "tokenizer.json"]


@pytest.fixture
def cnn_ckpt(tmp_path):
    return write_checkpoint(tmp_path / "last.ckpt", "cnn")


@pytest.mark.parametrize(
    "args,message",
    [
        (["format=tflite"], "format='tflite' is not one export writes; give format=onnx or format=pt2"),
        (["format=onnx", "ckpt="], "export needs ckpt="),
        (["ckpt={ckpt}"], "export needs format="),
        (["format=onnx", "ckpt={ckpt}", "opset=17"], "export takes ckpt=, format=, out=, net=, net_args=; not opset"),
        (["format=onnx", "ckpt={dir}/missing.ckpt"], "missing.ckpt does not exist"),
        (["format=onnx", "ckpt={dir}/bad.ckpt"], "bad.ckpt is not a readable checkpoint"),
        (["format=onnx", "ckpt={ckpt}", "out={dir}/last.ckpt/m.onnx"], "is not a folder"),
        (["format=pt2", "ckpt={ckpt}", "out={dir}"], "is a folder; give the file to write"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cnn_ckpt, capsys, args, message):
    folder = cnn_ckpt.parent
    (folder / "bad.ckpt").write_bytes(cnn_ckpt.read_bytes()[:1000])
    before = sorted(folder.iterdir())
    args = [a.format(ckpt=cnn_ckpt, dir=folder) for a in args]
    if not any(a.startswith("ckpt=") for a in args):
        args.append(f"ckpt={cnn_ckpt}")
    code, out, err = run(["export", *args], capsys)
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert sorted(folder.iterdir()) == before


def test_onnx_without_its_packages_is_one_line(cnn_ckpt, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    code, out, err = run(["export", f"ckpt={cnn_ckpt}", "format=onnx"], capsys)
    assert code == 2 and len(err) == 1 and "pip install 'xla_train[export]'" in err[0], err
    assert not cnn_ckpt.with_suffix(".onnx").exists()


def test_an_unsafe_checkpoint_is_refused_without_running_it(cnn_ckpt, capsys):
    class RunsCode:
        def __reduce__(self):
            return (open, (str(cnn_ckpt.parent / "pwned"), "w"))

    torch.save({"state_dict": {}, "payload": RunsCode()}, cnn_ckpt.parent / "evil.ckpt")
    code, out, err = run(["export", f"ckpt={cnn_ckpt.parent / 'evil.ckpt'}", "format=onnx"], capsys)
    assert code == 2 and len(err) == 1 and "is unsafe" in err[0] and "could run code from the file" in err[0]
    assert not (cnn_ckpt.parent / "pwned").exists() and not (cnn_ckpt.parent / "evil.onnx").exists()


def test_a_failed_write_leaves_no_file_behind(tmp_path, capsys, monkeypatch, arch="lstm", fmt="pt2"):
    """The disk fills up as the model is written: no model, no temp file, and no tokenizer.json without its model."""
    ckpt = write_checkpoint(tmp_path / "last.ckpt", arch)
    real_write = export_module.atomic_write

    def full_disk(path, write):
        if path.suffix == f".{fmt}":

            def write_half(f):
                f.write(b"partial")
                raise OSError(errno.ENOSPC, "No space left on device")

            return real_write(path, write_half)
        return real_write(path, write)

    monkeypatch.setattr(export_module, "atomic_write", full_disk)
    code, out, err = run(["export", f"ckpt={ckpt}", f"format={fmt}"], capsys)
    assert code == 2 and len(err) == 1 and "No space left on device" in err[0] and f"last.{fmt}" in err[0]
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
