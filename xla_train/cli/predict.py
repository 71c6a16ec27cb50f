"""`python -m xla_train predict`: CPU inference from a checkpoint, one line per input, or a whole split.

Each line is NAME, the predicted label, its probability, and with --probs (always,
for text) every label's probability; for a sentiment checkpoint `pos=` is
P(positive). Images come as files, folders or .npy arrays; reviews as text=,
as .txt files (one review each), or with --lines as files of one review per line.
Plain torch: neither Lightning nor torch_xla is imported. With split= instead, a whole split of the run's own
data goes through a Trainer on any accelerator (config/saved_run.py), and the table is written beside the run.
"""

from __future__ import annotations

from typing import Literal

from jsonargparse.typing import PositiveInt

from xla_train.cli.keys import read_keys, with_net_args
from xla_train.errors import ConfigError
from xla_train.runtime.registry import runtime_names


def parse(pairs: dict[str, str], flags: list[str]) -> tuple:
    """(the predict form's function, its keyword arguments): split= picks the whole-split form."""
    if "split" in pairs and {"inputs", "text"} & set(pairs):
        raise ConfigError("split= predicts the run's own data; give either inputs= or split=, not both")
    fn = predict_split if "split" in pairs else predict
    prog = "predict with split=" if fn is predict_split else "predict"
    return fn, read_keys(fn, with_net_args(pairs), flags, prog=prog)


def predict(
    ckpt: str,
    inputs: str = "",
    text: str | None = None,
    batch_size: PositiveInt = 256,
    probs: bool = False,
    lines: bool = False,
    net: str | None = None,
    net_args: dict | None = None,
) -> int:
    """One line per input file (or per line of one, with lines), or for text=. net= names the class of a
    checkpoint's own net (never imported on the checkpoint's word); net_args its init arguments where the
    checkpoint has none (model.net.init_args.NAME=value)."""
    if not inputs and text is None:
        raise ConfigError(
            "predict needs inputs=FILE[,FILE...] (images, a folder of them, a .npy array, or .txt "
            'reviews), text="a review", or split=test|val|train (a whole split of the run\'s data)'
        )
    if text is not None and not text.strip():
        raise ConfigError('text= is empty; give the review to classify, e.g. text="A wonderful film."')

    from xla_train.serve.predictor import load_for_inference

    predictor = load_for_inference(ckpt, net=net, args=net_args)
    specs = [s for s in inputs.split(",") if s]
    if predictor.kind == "array":
        if text is not None or lines:
            raise ConfigError(f"{ckpt} classifies arrays; give them as inputs=FILE.npy[,FILE.npy...], not text")
        from xla_train.serve.inputs import read_samples

        names, raw = read_samples(specs, predictor.info["shape"])
        show_all = probs
    elif predictor.kind == "text":
        from xla_train.serve.inputs import read_texts

        names, raw = read_texts(specs, per_line=lines) if specs or text is None else ([], [])
        if text is not None:
            names, raw = ["text", *names], [text, *raw]
        show_all = True
    else:
        if text is not None or lines:
            raise ConfigError(f"{ckpt} classifies images; give them as inputs=FILE[,FILE...], not text")
        from xla_train.serve.inputs import read_images

        names, raw = read_images(specs, predictor.info["image_size"], predictor.channels)
        show_all = probs
    rows = predictor.probabilities(raw, batch_size=batch_size)
    for name, row in zip(names, rows):
        top = int(row.argmax())
        line = f"{name}\t{predictor.labels[top]}\t{float(row[top]):.4f}"
        if show_all:
            line += "\t" + " ".join(f"{lab}={float(p):.4f}" for lab, p in zip(predictor.labels, row))
        print(line)
    from xla_train.serve.inputs import folder_classes

    truth = folder_classes(specs, names, predictor.labels)
    if truth is not None:  # a class-folder tree, its folders named as the checkpoint's labels
        right = sum(int(row.argmax()) == t for row, t in zip(rows, truth))
        print(f"accuracy {right / len(truth):.4f} ({right} of {len(truth)}; each input's class is its folder's name)")
    return 0


def predict_split(
    ckpt: str,
    split: str,
    accelerator: str = "auto",
    devices: PositiveInt | Literal["auto"] = "auto",
    batch_size: PositiveInt | None = None,
    data_dir: str | None = None,
    out: str | None = None,
    probs: bool = False,
    net: str | None = None,
    runtime: Literal[runtime_names()] = "auto",
) -> int:
    """A whole split through a Trainer (config/saved_run.py); says where the table went."""
    from xla_train.config.saved_run import predict_split as run  # Lightning: a split runs through a Trainer

    path, r = run(ckpt, split, accelerator, devices, batch_size, data_dir, out, probs, net, runtime)
    from xla_train.serve.table import accuracy

    print(
        f"predicted {len(r.probs)} samples of the {split} split on {r.device} in {r.batches} "
        f"batch(es) of {r.global_batch} (the last padded)"
    )
    if r.compiled:
        print(f"XLA graphs compiled: {r.graphs_first_batch} for the first batch, {r.graphs_after_first_batch} after it")
    print(f"accuracy {accuracy(r.probs, r.labels):.4f}")
    print(f"predictions: {path}")
    return 0
