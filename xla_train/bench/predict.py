"""`bench predict`: how fast a checkpoint serves on a plain CPU, in each form it can be served in, side by side.

The forms are timed in this process on the same ready inputs, their calls taken in turn after untimed warm-up
(torch.compile's compilation included), so a slow spell falls on all. Each form's probabilities are compared
with eager's, and int8, not being float32, has its test-split accuracy shown beside eager's, not hidden
(docs/serving.md, "Inference speed"; docs/results.md, "bench predict, curves and text").
"""

from __future__ import annotations

import copy
import statistics
from pathlib import Path
from typing import Literal, Optional

from jsonargparse.typing import PositiveInt
from torch import nn

from xla_train.bench import report
from xla_train.bench.data import synthetic_reviews
from xla_train.bench.timing import percentile, time_calls
from xla_train.models.lstm import MaskedLSTM
from xla_train.serve.predictor import load_for_inference

Form = Literal["eager", "compile", "onnx", "int8"]
COLUMNS = [
    "what",
    "fp32",
    "latency_ms_median",
    "latency_ms_p95",
    "speedup_batch1",
    "batch",
    "batch_ms_median",
    "samples_per_s",
    "max_abs_diff",
    "test_acc",
    "acc_change",
    "repeats",
    "note",
]


def raw_inputs(predictor, n: int):
    import numpy as np

    if predictor.kind == "text":
        return synthetic_reviews(n)
    s = int(predictor.info["image_size"])
    return np.random.default_rng(0).integers(0, 256, (n, s, s, 3), dtype=np.uint8)


class Int8Recurrence(nn.LSTM):
    """nn.LSTM's kernel replaced by torch's dynamic int8 LSTM (`self.int8`)."""

    def forward(self, input, hx=None):  # noqa: A002 (nn.LSTM's argument name)
        return self.int8(input, hx)


class Int8MaskedLSTM(MaskedLSTM, Int8Recurrence):
    """The masked LSTM (models/lstm.py), unchanged but for its recurrence: MaskedLSTM's call to nn.LSTM's
    kernel lands, by the method order, on Int8Recurrence. (Its final cell state, which the model does not
    use, is still rebuilt from the float weights.)"""

    @classmethod
    def from_float(cls, lstm: MaskedLSTM) -> Int8MaskedLSTM:
        from torch.ao.nn.quantized.dynamic import LSTM as DynamicLSTM
        from torch.ao.quantization import default_dynamic_qconfig

        plain = nn.LSTM(lstm.input_size, lstm.hidden_size, batch_first=lstm.batch_first)
        plain.load_state_dict(lstm.state_dict())
        plain.qconfig = default_dynamic_qconfig
        masked = copy.deepcopy(lstm)
        masked.__class__ = cls
        masked.int8 = DynamicLSTM.from_float(plain)
        return masked


def int8_dynamic(net: nn.Module) -> nn.Module:
    """A copy with nn.Linear and the LSTM's recurrence in int8 (weights quantised once, activations per call)."""
    import torch
    from torch.ao.quantization import quantize_dynamic

    q = quantize_dynamic(copy.deepcopy(net), {nn.Linear}, dtype=torch.qint8)
    for name, child in list(q.named_modules()):
        if type(child) is MaskedLSTM:  # quantize_dynamic maps nn.LSTM itself, not a subclass
            parent, _, attr = name.rpartition(".")
            setattr(q.get_submodule(parent), attr, Int8MaskedLSTM.from_float(child))
    return q


def serving_forms(net, ckpt):
    """(name, float32?, takes raw input?, build) for each serving form; build() returns a callable input ->
    probabilities, or raises. The raw input is what the exported graph takes: uint8 images, or token ids."""
    import torch

    from xla_train.objective import probabilities

    def on(module):
        return lambda t: probabilities(module(t))

    return {
        "eager": ("eager", True, False, lambda: on(net)),
        "compile": (
            "torch.compile",
            True,
            False,
            lambda: on(torch.compile(copy.deepcopy(net), dynamic=False, options={"freezing": True})),
        ),
        "onnx": ("onnxruntime", True, True, lambda: onnx_runtime(ckpt)),
        "int8": ("int8 dynamic", False, False, lambda: on(int8_dynamic(net))),
    }


def onnx_runtime(ckpt):
    """The checkpoint exported to ONNX (serve/export.py: preprocessing and softmax in the graph) in an ONNX
    Runtime session on the CPU with torch's thread count."""
    import tempfile

    import numpy as np
    import onnxruntime as ort
    import torch

    from xla_train.serve.export import export

    with tempfile.TemporaryDirectory() as tmp:
        path = export(ckpt, "onnx", out=Path(tmp) / "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda a: torch.from_numpy(session.run(None, {name: np.ascontiguousarray(a)})[0])


def split_accuracy(fn, raw: bool, split, batch: int = 256) -> float:
    transform, inputs, labels = split
    hits = 0
    for i in range(0, len(inputs), batch):
        chunk = inputs[i : i + batch]
        top = fn(chunk if raw else transform(chunk)).argmax(1).numpy()
        hits += int((top == labels[i : i + batch]).sum())
    return hits / len(inputs)


def predict(
    ckpt: str,
    batch_size: PositiveInt = 256,
    repeats: PositiveInt = 100,
    threads: Optional[PositiveInt] = None,
    forms: list[Form] = ["eager", "compile", "onnx", "int8"],
    score: bool = True,
    runs_dir: str = "runs",
    command: str = "",
) -> tuple[int, Path]:
    """forms: which to compare (eager always comes first, as the baseline); score: also measure each form's
    accuracy on the checkpoint's test split."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    predictor = load_for_inference(ckpt)
    batch = batch_size
    raw = raw_inputs(predictor, batch)
    x = predictor.preprocess(raw)
    exported_input = x.numpy() if predictor.kind == "text" else raw  # token ids, or uint8 images
    net = predictor.model.eval()
    notes_extra, split = [], None
    if score:
        try:
            from xla_train.config.saved_run import split_data

            split = split_data(ckpt, "test")
        except Exception as e:  # no run config, no data here: the accuracy columns stay empty, and say why
            notes_extra.append(f"no test-split accuracy: {str(e).splitlines()[0] if str(e) else type(e).__name__}")

    built, rows = [], []
    with torch.no_grad():
        reference = predictor.probabilities(raw, batch_size=batch)
        available = serving_forms(net, ckpt)
        for name, fp32, takes_raw, build in [available[k] for k in dict.fromkeys(["eager", *forms])]:
            row = {"what": name, "fp32": fp32, "batch": batch, "repeats": repeats}
            rows.append(row)
            inp = exported_input if takes_raw else x
            try:
                fn = build()
                row["max_abs_diff"] = float((fn(inp) - reference).abs().max())  # also the first warm-up call
                fn(inp[:1])
                if split is not None:
                    row["test_acc"] = split_accuracy(fn, takes_raw, split)
            except Exception as e:  # a form this machine cannot run is a row that says so, not a crash
                row["note"] = f"skipped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
                continue
            built.append((row, fn, inp))

    def call(fn, inp, k):
        def run():
            with torch.no_grad():
                return fn(inp[:k])

        return run

    def end_to_end(k):
        one = raw[:k]
        return lambda: predictor.probabilities(one, batch_size=k)

    e2e = {
        "what": "eager end to end",
        "fp32": True,
        "batch": batch,
        "repeats": repeats,
        "note": "preprocessing + net + softmax, as `python -m xla_train predict` runs it",
    }
    timed = [(r, call(fn, inp, 1), call(fn, inp, batch)) for r, fn, inp in built]
    timed.append((e2e, end_to_end(1), end_to_end(batch)))
    latencies = time_calls([small for _, small, _ in timed], repeats, warmup=10, block=10)
    batches = time_calls([big for _, _, big in timed], max(5, repeats // 10), warmup=2)
    for (row, _, _), lat, big in zip(timed, latencies, batches):
        row.update(
            {
                "latency_ms_median": statistics.median(lat) * 1e3,
                "latency_ms_p95": percentile(lat, 0.95) * 1e3,
                "batch_ms_median": statistics.median(big) * 1e3,
                "samples_per_s": batch / statistics.median(big),
            }
        )
    rows.append(e2e)
    eager = rows[0]
    for r in rows:
        if "latency_ms_median" in r and "latency_ms_median" in eager:
            r["speedup_batch1"] = eager["latency_ms_median"] / r["latency_ms_median"]
        if "test_acc" in r and "test_acc" in eager:
            r["acc_change"] = r["test_acc"] - eager["test_acc"]
    return write_report(rows, predictor, ckpt, batch, repeats, command, runs_dir, notes_extra)


def write_report(rows, predictor, ckpt, batch, repeats, command, runs_dir, notes_extra) -> tuple[int, Path]:
    import torch

    arch = f"{predictor.net_name} {predictor.init_args or ''}"
    prov = report.provenance(command, [f"CPU, PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s)"])
    run_dir = report.new_run_dir(runs_dir)
    headers = [
        "",
        "fp32",
        "batch 1 median ms",
        "batch 1 p95 ms",
        "x eager (batch 1)",
        f"batch {batch} samples/s",
        "max abs diff vs eager",
        "test acc",
        "acc change",
    ]

    def f(r, key, digits):
        return (
            report.fmt(r[key], digits)
            if r.get(key) is not None
            else r.get("note", "")[:40]
            if key == "latency_ms_median"
            else ""
        )

    table = [
        [
            r["what"],
            "yes" if r["fp32"] else "no",
            f(r, "latency_ms_median", 3),
            f(r, "latency_ms_p95", 3),
            f(r, "speedup_batch1", 2),
            f(r, "samples_per_s", 0),
            f"{r['max_abs_diff']:.1e}" if r.get("max_abs_diff") is not None else "",
            f(r, "test_acc", 4),
            f"{r['acc_change']:+.4f}" if r.get("acc_change") is not None else "",
        ]
        for r in rows
    ]
    inputs = "synthetic reviews" if predictor.kind == "text" else f"random {predictor.info['image_size']}px images"
    notes = [
        f"checkpoint {ckpt}: {arch}",
        f"inputs: {inputs}; {repeats} timed calls at batch 1 after 10 "
        f"warm-up calls, in blocks of 10 calls per form taken in turn; median of {max(5, repeats // 10)} "
        f"batches of {batch}, forms taken in turn",
        "max abs diff: each form's probabilities minus eager end to end's, on the same inputs",
        "onnxruntime runs the exported graph, which takes uint8 images or token ids: preprocessing is in it",
        "test acc: the checkpoint's own test split, as its run reads it",
    ] + notes_extra
    notes += [f"{r['what']}: {r['note']}" for r in rows if r.get("note", "").startswith("skipped")]
    report.publish(run_dir, "predict", "xla_train CPU inference", prov, rows, COLUMNS, headers, table, notes)
    return 0, run_dir
