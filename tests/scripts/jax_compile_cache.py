"""Run by tests/test_jax_runtime.py: two fits of one net on runtime=jax with compile_cache=DIR (argv[1]), in one
process as a notebook runs them; each fit builds its own programs, so the second finds them in the folder or compiles
them again. JAX caches only programs that took a second or more to compile; these take less, so the threshold is 0."""

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import jax
import numpy as np
import torch
import xla_train
from user_nets import FlatNet

jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
folder = Path(sys.argv[1]) / "cache"
rng = np.random.default_rng(0)
x = rng.normal(size=(96, 2, 4, 4)).astype(np.float32)
y = (x[:, 0].mean((1, 2)) > 0).astype(np.int64) + 2 * (x[:, 1].mean((1, 2)) > 0)
runs = []
for _ in range(2):
    torch.manual_seed(0)
    net = FlatNet()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        xla_train.fit(
            net=net, x=x, y=y, runtime="jax", accelerator="xla", epochs=1, batch_size=16, compile_cache=str(folder)
        )
    out = printed.getvalue()
    read = re.search(r"(\d+) program\(s\) read back from the compile cache", out)
    runs.append(
        {
            "cache_line": f"compile cache: {folder}" in out,
            "read_back": int(read.group(1)) if read else 0,
            "compiled": re.search(r"^compiled graphs by phase: (.*)$", out, re.M).group(1),
            "weights": [p.detach().clone() for p in net.parameters()],
            "files": len(list(folder.glob("*"))),
        }
    )
same = all(torch.equal(a, b) for a, b in zip(runs[0]["weights"], runs[1]["weights"]))
print(json.dumps({"runs": [{k: v for k, v in r.items() if k != "weights"} for r in runs], "same_weights": same}))
