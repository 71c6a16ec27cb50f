"""Page faults per XLA:CPU execution of the quickstart CNN's training step, and the step's time, under the C heap
settings of the environment this runs in. XLA:CPU mallocs each execution's temporary buffer (over 32 MB here, above
glibc's largest mmap threshold), so glibc maps fresh zeroed pages for it every execution and unmaps them after.
glibc's malloc settings are environment variables, read at process start; compare them side by side in one
session, alternating (docs/results.md, "XLA:CPU's fresh pages per execution"):

    python xla_train/bench/peers/xla_cpu_page_faults.py
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python xla_train/bench/peers/xla_cpu_page_faults.py    # docs/hardware.md's shell setting
    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 MALLOC_ARENA_MAX=2 python xla_train/bench/peers/xla_cpu_page_faults.py
    python xla_train/bench/peers/xla_cpu_page_faults.py 4          # K=4 only (default: K=1, then K=4, in one process)
    python xla_train/bench/peers/xla_cpu_page_faults.py --csv FILE # also FILE: the figures under their provenance

Each execution is waited for before the next is traced (not pipelined as in training), so a step time is its
execution's own; `python -m xla_train bench` gives the pipelined figure. A peer measurement, not part of the
package, and not an xla_train command.
"""

import os
import resource
import statistics
import sys
import time

from xla_train.bench import report

COMMAND = report.peer_invocation(__file__, sys.argv[1:])  # before torch_xla adds its flags
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
from torch import nn  # noqa: E402

from xla_train.models.cnn import CifarCNN  # noqa: E402


def measure(k: int, executions: int = 8, batch: int = 32) -> dict:
    """K training steps (Adam) unrolled per execution: faults and milliseconds per step, after 3 warm-ups."""
    torch.manual_seed(0)
    device = torch_xla.device()
    net = CifarCNN().to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(k, batch, 3, 32, 32).to(device)
    y = torch.randint(0, 10, (k, batch)).to(device)

    def execution():
        for j in range(k):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[j]), y[j]).backward()
            opt.step()
        torch_xla.sync()
        xm.wait_device_ops()

    for _ in range(3):
        execution()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = []
    for _ in range(executions):
        t0 = time.perf_counter()
        execution()
        times.append((time.perf_counter() - t0) / k)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / executions
    return {"k": k, "faults_per_execution": round(faults), "step_ms": round(statistics.median(times) * 1e3, 1)}


if __name__ == "__main__":
    out, args = report.peer_args(sys.argv[1:])
    settings = {v: os.environ[v] for v in sorted(os.environ) if v.startswith("MALLOC_") or v == "GLIBC_TUNABLES"}
    print(f"C heap settings: {settings or 'none (glibc defaults)'}", flush=True)
    rows = []
    for k in [int(a) for a in args] or [1, 4]:
        rows.append({"heap": " ".join(f"{n}={v}" for n, v in settings.items()) or "glibc defaults", **measure(k)})
        print(rows[-1], flush=True)
    if out is not None:
        report.write_csv(out, rows, list(rows[0]), report.provenance(COMMAND, ["XLA:CPU"]))
