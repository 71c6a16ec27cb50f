"""What it costs to mark a traced tensor replicated under SPMD: torch_xla's public `xs.mark_sharding`, which rebuilds
the mesh's OpSharding and probes for jax/torchax on every call, against the call xla_train makes
(runtime/torch_xla/compat.py, `xla_mark_sharding`) with an OpSharding built once. xla_train marks every
state tensor of every K-step execution, so the difference is paid per tensor per execution. docs/results.md,
"A sharding call's cost":

    python xla_train/bench/peers/sharding_call.py --csv FILE

On 8 XLA:CPU devices (PJRT_DEVICE=CPU, CPU_NUM_DEVICES=8 unless set), each call on a fresh traced tensor (pending
work, as a step's outputs are when they are marked), the two calls taken in turn over rounds. A peer measurement,
not an xla_train command.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from xla_train.bench import report

COMMAND = report.peer_invocation(__file__, sys.argv[1:])  # before torch_xla adds its flags
os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "8")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

from xla_train.runtime.torch_xla.compat import xla_mark_sharding  # noqa: E402

TENSORS, ROUNDS = 200, 5


def main(argv: list[str]) -> int:
    out, _ = report.peer_args(argv)
    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices,))
    base = torch.zeros(64, 64, device=torch_xla.device())
    torch_xla.sync()
    spec = (None, None)
    built = mesh.get_op_sharding(spec)
    calls = {
        "xs.mark_sharding (public)": lambda t: xs.mark_sharding(t, mesh, spec),
        "compat.xla_mark_sharding, OpSharding built once": lambda t: xla_mark_sharding(t, built),
    }
    seconds = {name: [] for name in calls}
    for _ in range(ROUNDS + 1):  # the first round warms up
        for name, call in calls.items():
            fresh = [base + i for i in range(TENSORS)]  # traced, not run
            t0 = time.perf_counter()
            for t in fresh:
                call(t)
            seconds[name].append((time.perf_counter() - t0) / TENSORS)
    rows = [
        {
            "call": name,
            "ms_per_tensor": round(statistics.median(s[1:]) * 1e3, 4),
            "tensors": TENSORS,
            "rounds": ROUNDS,
            "devices": devices,
        }
        for name, s in seconds.items()
    ]
    for r in rows:
        print(r)
    if out is not None:
        prov = report.provenance(COMMAND, [f"XLA:CPU x{devices}, SPMD"])
        report.write_csv(out, rows, list(rows[0]), prov)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
