"""`python -m xla_train predict`: CPU inference from a checkpoint, one line per input, or a whole split.

Each line is NAME, the predicted label, its probability, and with --probs (always,
for text) every label's probability; for a sentiment checkpoint `pos=` is
P(positive). Images come as files, folders or .npy arrays; reviews as text=,
as .txt files (one review each), or with --lines as files of one review per line.
Plain torch: neither Lightning nor torch_xla is imported. With split= instead, a whole split of the run's own
data goes through a Trainer on any accelerator (config/saved_run.py), and the table is written beside the run.
"""

from __future__ import annotations

from xla_train.errors import ConfigError

KEYS = ("ckpt", "inputs", "text", "batch_size")


def positive_int(pairs: dict[str, str], key: str, default):
    """pairs[key] as a whole number of at least 1, or `default` where it is not given; else one line."""
    if key not in pairs:
        return default
    value = pairs[key].strip()
    if not (value.isdigit() and int(value) >= 1):
        raise ConfigError(f"{key}={pairs[key]!r} must be a positive whole number")
    return int(value)


FLAGS = ("--probs", "--lines")


def predict_command(pairs: dict[str, str], flags: list[str]) -> int:
    unknown = sorted(set(pairs) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"predict takes {', '.join(k + '=' for k in KEYS)}, --probs and --lines; not {', '.join(unknown)}"
        )
    bad_flags = [f for f in flags if f not in FLAGS]
    if bad_flags:
        raise ConfigError(f"predict does not know {' '.join(bad_flags)}; its flags are {' and '.join(FLAGS)}")
    if "ckpt" not in pairs:
        raise ConfigError("predict needs ckpt=PATH (a checkpoint written by fit)")
    if "inputs" not in pairs and "text" not in pairs:
        raise ConfigError(
            "predict needs inputs=FILE[,FILE...] (images, a folder of them, a .npy array, or .txt "
            'reviews), text="a review", or split=test|val|train (a whole split of the run\'s data)'
        )
    if "text" in pairs and not pairs["text"].strip():
        raise ConfigError('text= is empty; give the review to classify, e.g. text="A wonderful film."')
    batch_size = positive_int(pairs, "batch_size", 256)

    from xla_train.serve.predictor import load_for_inference

    predictor = load_for_inference(pairs["ckpt"])
    specs = [s for s in pairs.get("inputs", "").split(",") if s]
    if predictor.kind == "text":
        from xla_train.serve.inputs import read_texts

        names, raw = read_texts(specs, per_line="--lines" in flags) if specs or "text" not in pairs else ([], [])
        if "text" in pairs:
            names, raw = ["text", *names], [pairs["text"], *raw]
        show_all = True
    else:
        if "text" in pairs or "--lines" in flags:
            raise ConfigError(f"{pairs['ckpt']} classifies images; give them as inputs=FILE[,FILE...], not text")
        from xla_train.serve.inputs import read_images

        names, raw = read_images(specs, predictor.info["image_size"])
        show_all = "--probs" in flags
    probs = predictor.probabilities(raw, batch_size=batch_size)
    for name, row in zip(names, probs):
        top = int(row.argmax())
        line = f"{name}\t{predictor.labels[top]}\t{float(row[top]):.4f}"
        if show_all:
            line += "\t" + " ".join(f"{lab}={float(p):.4f}" for lab, p in zip(predictor.labels, row))
        print(line)
    return 0


SPLIT_KEYS = ("ckpt", "split", "accelerator", "devices", "batch_size", "data_dir", "out")


def split_predict_command(pairs: dict[str, str], flags: list[str]) -> int:
    """The command line's `predict ... split=`: checks its keys, predicts, says where the table went."""
    unknown = sorted(set(pairs) - set(SPLIT_KEYS))
    if unknown:
        extra = "; give either inputs= or split=, not both" if {"inputs", "text"} & set(unknown) else ""
        raise ConfigError(
            f"predict with split= takes {', '.join(k + '=' for k in SPLIT_KEYS)} and --probs; not {', '.join(unknown)}{extra}"
        )
    bad_flags = [f for f in flags if f != "--probs"]
    if bad_flags:
        raise ConfigError(f"predict with split= does not know {' '.join(bad_flags)}; its flag is --probs")
    if "ckpt" not in pairs:
        raise ConfigError("predict needs ckpt=PATH (a checkpoint written by fit)")
    devices = pairs.get("devices", "auto")
    if devices != "auto" and not (devices.isdigit() and int(devices) >= 1):
        raise ConfigError(f"devices={devices!r} must be a whole number of at least 1, or auto")
    batch_size = positive_int(pairs, "batch_size", None)
    from xla_train.config.saved_run import predict_split  # Lightning: a split runs through a Trainer

    path, r = predict_split(
        pairs["ckpt"],
        pairs["split"],
        pairs.get("accelerator", "auto"),
        devices,
        batch_size,
        pairs.get("data_dir"),
        pairs.get("out"),
        "--probs" in flags,
    )
    from xla_train.serve.table import accuracy

    print(
        f"predicted {len(r.probs)} samples of the {pairs['split']} split on {r.device} in {r.batches} "
        f"batch(es) of {r.global_batch} (the last padded)"
    )
    if r.compiled:
        print(f"XLA graphs compiled: {r.graphs_first_batch} for the first batch, {r.graphs_after_first_batch} after it")
    print(f"accuracy {accuracy(r.probs, r.labels):.4f}")
    print(f"predictions: {path}")
    return 0
