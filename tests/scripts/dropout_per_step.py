"""Run by tests/test_dropout.py in a fresh process, on the runtime its first argument names, in the folder its second
names: fits of probes.DropoutNet on one row repeated, at a learning rate that leaves the weights as they are, one
step an epoch, for each seed the rest of the arguments name in turn; prints each fit's per-step losses (its epochs'
train_loss)."""

import csv
import json
import sys
from pathlib import Path

import numpy as np

from xla_train.cli.main import main

runtime, work, seeds = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
row = np.random.default_rng(0).normal(size=(1, 16)).astype(np.float32)
x, y = np.repeat(row, 64, 0), np.zeros(64, np.int64)
two = {"x": x[:2], "y": np.arange(2)}  # two classes (for the net's one logit); held out, never trained on
np.savez(work / "one_row.npz", x_train=x, y_train=y, x_test=two["x"], y_test=two["y"], x_val=two["x"], y_val=two["y"])
losses = []
for i, seed in enumerate(seeds):
    args = ["recipe=arrays", f"data.path={work / 'one_row.npz'}", "net=probes.DropoutNet", "accelerator=xla"]
    args += [f"runtime={runtime}", f"seed={seed}", "lr=1e-30", "batch_size=64", "epochs=4", "test_after_fit=false"]
    assert main([*args, "predict_samples=0", "--trainer.limit_val_batches=0"]) == 0, seed
    with open(work / "runs" / "arrays" / f"version_{i}" / "metrics.csv") as f:
        losses.append([float(r["train_loss"]) for r in csv.DictReader(f) if r["train_loss"]])
print(json.dumps(losses))
