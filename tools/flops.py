"""Writes docs/results/flops.csv: the floating-point operations of one training step (forward and backward) of each
recipe's net at its batch, counted by torch.utils.flop_counter on the CPU, so that results.md's estimate of a TPU
chip's step time starts from a count a command made, not from a figure typed in.

The count is of matmuls and convolutions (what flop_counter counts), which is what a TPU's matrix units run. The
IMDB row is the masked LSTM's matmuls at the recipe's maxlen: the scan XLA runs does the same products.

    python tools/flops.py docs/results/flops.csv
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

RECIPES = ("quickstart", "cifar10", "cifar10_resnet", "imdb")


def batch_of(recipe_name: str, recipe: dict):
    """A batch of the recipe's input shapes and its labels."""
    import torch

    args = recipe["data"].get("init_args", {})
    batch = args.get("batch_size", 32)
    if recipe_name == "imdb":
        x = torch.randint(1, args.get("vocab_size", 10000), (batch, args.get("maxlen", 500)))
        return x, torch.randint(0, 2, (batch,)).float()
    return torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))


def count(recipe_name: str) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from xla_train.config.recipes import load_recipe, recipe_path
    from xla_train.models.reference import build_with, import_class

    recipe = load_recipe(recipe_path(recipe_name))
    torch.manual_seed(0)
    spec = recipe["model"]["net"]
    net = build_with(import_class(spec["class_path"]), spec["class_path"], spec.get("init_args", {})).train()
    x, y = batch_of(recipe_name, recipe)
    # oneDNN's fused CPU LSTM is one op that flop_counter cannot see into; torch's own LSTM runs its matmuls as ops
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flag's own note on TF32 for Intel GPUs
        with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
            out = net(x)
            loss = (
                torch.nn.functional.binary_cross_entropy_with_logits(out.squeeze(-1), y)
                if recipe_name == "imdb"
                else torch.nn.functional.cross_entropy(out, y)
            )
            loss.backward()
    return {
        "recipe": recipe_name,
        "net": type(net).__name__,
        "batch": len(x),
        "input": f"maxlen {x.shape[1]}" if recipe_name == "imdb" else "x".join(map(str, x.shape[1:])),
        "gflop_per_step": round(counter.get_total_flops() / 1e9, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    from xla_train.bench import report

    rows = [count(name) for name in RECIPES]
    prov = report.provenance(f"python tools/flops.py {args.out}", ["CPU, torch.utils.flop_counter (a count)"])
    report.write_csv(args.out, rows, list(rows[0]), prov)
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
