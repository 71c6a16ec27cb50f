"""`python -m xla_train export ckpt=PATH format=onnx|pt2 [out=PATH]`: a checkpoint as a self-contained graph.

The graph takes what `predict` takes once inputs are decoded (uint8 NHWC images, or int64 token ids made with the
checkpoint's tokenizer, written beside it) and returns probabilities, with scaling, normalising and the binary
logit's two probabilities inside, so a deployment cannot get preprocessing wrong. Both formats come from one
torch.export trace with a dynamic batch; nothing is overwritten and every file is written atomically. Imports
neither Lightning nor torch_xla (docs/serving.md, "Export").
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

from xla_train.checkpoint import atomic_write
from xla_train.errors import ConfigError, UserError
from xla_train.objective import probabilities

FORMATS = ("onnx", "pt2")
OPSET = 18  # the ONNX opset of every exported model; also in its metadata_props["opset"]
TRACE_BATCH = 2


class ExportError(UserError):
    """The output cannot be written where asked."""


class ImageServing(nn.Module):
    """uint8 (N, H, W, 3) -> probabilities (N, classes): scale, normalise, net, softmax."""

    def __init__(self, net: nn.Module, mean, std):
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1) * 255.0)
        self.register_buffer("inv_std", 1.0 / (torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1) * 255.0))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = (images.permute(0, 3, 1, 2).to(torch.float32) - self.mean) * self.inv_std
        return probabilities(self.net(x))


class DirectServing(nn.Module):
    """Inputs as the net takes them (int64 token ids (N, maxlen) padded with 0 as in training; a user's arrays) ->
    probabilities."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return probabilities(self.net(ids))


_SIDE = {"pre": "front", "post": "back"}


def serving_module(predictor) -> tuple[nn.Module, torch.Tensor, str]:
    """(the graph to export, an example input, its name)."""
    info = predictor.info
    if predictor.kind == "text":
        example = torch.zeros(TRACE_BATCH, int(info["maxlen"]), dtype=torch.int64)
        example[:, -1 if predictor.sides[0] == "pre" else 0] = 2  # one real word per row, where the padding is not
        return DirectServing(predictor.model).eval(), example, "ids"
    if predictor.kind == "array":
        example = torch.zeros(TRACE_BATCH, *info["shape"], dtype=getattr(torch, info["dtype"]))
        return DirectServing(predictor.model).eval(), example, "inputs"
    size = int(info["image_size"])
    example = torch.zeros(TRACE_BATCH, size, size, predictor.channels, dtype=torch.uint8)
    return ImageServing(predictor.model, info["mean"], info["std"]).eval(), example, "images"


def metadata(predictor, fmt: str) -> dict[str, str]:
    """What a user of the file needs besides the graph: labels, input layout, and for text the tokenizer's file."""
    info = predictor.info
    meta = {
        "producer": "xla_train",
        "net": predictor.net_name,
        "kind": predictor.kind,
        "labels": json.dumps(predictor.labels),
        "output": "probabilities (N, classes), in the order of labels",
    }
    if fmt == "onnx":
        meta["opset"] = str(OPSET)
    if predictor.kind == "text":
        meta.update(
            input=f"int64 token ids (N, {int(info['maxlen'])}), padded at the {_SIDE[predictor.sides[0]]} with 0",
            padding=predictor.sides[0],
            truncating=predictor.sides[1],
            maxlen=str(int(info["maxlen"])),
            tokenizer="tokenizer.json",
        )
    elif predictor.kind == "array":
        meta.update(input=f"{info['dtype']} (N, {', '.join(map(str, info['shape']))}), as the net trained on them")
    else:
        size, c = int(info["image_size"]), predictor.channels
        meta.update(
            input=f"uint8 images (N, {size}, {size}, {c}), {'RGB' if c == 3 else 'grey'}",
            image_size=str(size),
            mean=json.dumps(list(info["mean"])),
            std=json.dumps(list(info["std"])),
        )
    return meta


def default_out(ckpt: Path, fmt: str) -> Path:
    return ckpt.with_name(f"{ckpt.stem}.{fmt}")


def _check_writable(path: Path) -> None:
    if path.exists():
        raise ExportError(f"{path} already exists; export never overwrites a file: remove it or give another out=")
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"cannot write {path}: {folder} is not a folder")
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write {path}: {probe} is not writable; give out= in a folder you can write")


def _trace(module: nn.Module, example: torch.Tensor, name: str):
    batch = torch.export.Dim("batch", min=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(module, (example,), dynamic_shapes={name: {0: batch}}, strict=False)


def _onnx_bytes(program, name: str, meta: dict[str, str]) -> bytes:
    import onnx

    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        onnx_program = torch.onnx.export(
            program,
            dynamo=True,
            opset_version=OPSET,
            input_names=[name],
            output_names=["probabilities"],
            external_data=False,
            verbose=False,
            optimize=True,
        )
        path = Path(tmp) / "model.onnx"
        onnx_program.save(str(path))
        model = onnx.load(str(path))
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _pt2_bytes(program) -> bytes:
    buf = io.BytesIO()
    torch.export.save(program, buf)
    return buf.getvalue()


def export(ckpt, fmt: str, out=None, net=None, net_args: dict | None = None) -> Path:
    """Write the checkpoint `ckpt` as `fmt` ("onnx" or "pt2") to `out` (default: beside it); returns the path written.

    A text checkpoint also gets tokenizer.json beside the model. Raises UserError, having written nothing, on bad
    input.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"format={fmt!r} is not one export writes; give format=onnx or format=pt2")
    if fmt == "onnx":
        try:
            import onnx  # noqa: F401
            import onnxscript  # noqa: F401
        except ImportError as e:
            raise ConfigError(
                f"format=onnx needs {e.name}: pip install 'xla_train[export]' "
                f"(onnx, onnxscript, onnxruntime), or give format=pt2"
            ) from None
    from xla_train.serve.predictor import load_for_inference

    ckpt = Path(ckpt)
    out = Path(out) if out is not None else default_out(ckpt, fmt)
    if out.is_dir():
        raise ExportError(
            f"out={out} is a folder; give the file to write, e.g. out={out / default_out(ckpt, fmt).name}"
        )
    predictor = load_for_inference(ckpt, net=net, args=net_args)
    _check_writable(out)
    tokenizer = out.with_name("tokenizer.json") if predictor.kind == "text" else None
    vocab = predictor.info["tokenizer"].encode("utf-8") if tokenizer is not None else b""
    if tokenizer is not None and tokenizer.is_file() and tokenizer.read_bytes() == vocab:
        tokenizer = None  # the same tokenizer is there already (the other format's export, say)
    if tokenizer is not None:
        _check_writable(tokenizer)
    module, example, name = serving_module(predictor)
    program = _trace(module, example, name)
    meta = metadata(predictor, fmt)
    data = _onnx_bytes(program, name, meta) if fmt == "onnx" else _pt2_bytes(program)
    written = []
    try:
        if tokenizer is not None:
            _write_new(tokenizer, vocab)
            written.append(tokenizer)
        _write_new(out, data)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return out


def _write_new(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, lambda f: f.write(data))
    except OSError as e:
        raise ExportError(f"could not write {path}: {e.strerror or e}; nothing was written") from None
