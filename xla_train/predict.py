"""`python -m xla_train predict ckpt=PATH inputs=...`: CPU inference from a checkpoint, one line per input.

Plain torch: neither Lightning nor torch_xla is imported.
"""
from __future__ import annotations

from xla_train.errors import ConfigError

KEYS = ("ckpt", "inputs", "batch_size")
FLAGS = ("--probs",)


def predict_command(pairs: dict[str, str], flags: list[str]) -> int:
    unknown = sorted(set(pairs) - set(KEYS))
    if unknown:
        raise ConfigError(f"predict takes {', '.join(k + '=' for k in KEYS)} and --probs; not {', '.join(unknown)}")
    bad_flags = [f for f in flags if f not in FLAGS]
    if bad_flags:
        raise ConfigError(f"predict does not know {' '.join(bad_flags)}; its only flag is --probs")
    if "ckpt" not in pairs:
        raise ConfigError("predict needs ckpt=PATH (a checkpoint written by fit)")
    if "inputs" not in pairs:
        raise ConfigError("predict needs inputs=FILE[,FILE...] (images, a folder of them, or a .npy array)")
    try:
        batch_size = int(pairs.get("batch_size", 256))
        if batch_size < 1:
            raise ValueError
    except ValueError:
        raise ConfigError(f"batch_size={pairs['batch_size']!r} must be a positive whole number") from None

    from xla_train.inference import load_for_inference
    from xla_train.inputs import read_images

    predictor = load_for_inference(pairs["ckpt"])
    names, images = read_images([s for s in pairs["inputs"].split(",") if s], predictor.info["image_size"])
    probs = predictor.probabilities(images, batch_size=batch_size)
    for name, row in zip(names, probs):
        top = int(row.argmax())
        line = f"{name}\t{predictor.labels[top]}\t{float(row[top]):.4f}"
        if "--probs" in flags:
            line += "\t" + " ".join(f"{lab}={float(p):.4f}" for lab, p in zip(predictor.labels, row))
        print(line)
    return 0
