"""Step time, throughput and compile time of the CIFAR-10 CNN on 1 and on n XLA devices, at one per-device batch.

    python -m xla_train.bench.replicas [--batch 16] [--steps 10] [--warmup 3] [--devices 1,8]

Each device count runs in its own process (the XLA runtime's device count and
SPMD mode are fixed per process) with PJRT_DEVICE=CPU, so the figures are
XLA:CPU figures on this machine, never TPU figures: on a CPU the "devices" are
threads sharing the same cores, and more of them cannot make a step faster.
What the numbers show is the cost of the SPMD program (partitioned compute
plus in-graph collectives) against one device. The step is the training step
the SPMD strategy runs: the batch sharded on a `data` mesh, BatchNorm as
reductions, forward, masked loss, backward, Adam, one graph cut. Warm-up steps (which compile) are outside
the timed part; each timed step waits for the device, and the median is reported.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from xla_train.bench.report import cpu_summary


def worker(devices: int, batch: int, steps: int, warmup: int) -> dict:
    """Runs inside a process started with PJRT_DEVICE=CPU CPU_NUM_DEVICES=devices."""
    import torch

    if devices > 1:
        from xla_train.runtime.spmd import batch_sharding, data_mesh, enable_spmd, use_reduction_batch_norm

        enable_spmd()  # before the first XLA tensor
    import torch_xla
    import torch_xla.core.xla_model as xm

    from torch_xla.debug import metrics as met

    from xla_train.models import CifarCNN
    from xla_train.tasks import masked_stats

    def compile_counters() -> tuple[int, float]:
        time_ns = met.metric_data("CompileTime")
        return int(met.counter_value("UncachedCompile") or 0), (time_ns[1] / 1e9 if time_ns else 0.0)

    sharding = batch_sharding(data_mesh(devices)) if devices > 1 else None
    device = torch_xla.device()
    torch.manual_seed(0)
    net = CifarCNN()
    if devices > 1:
        use_reduction_batch_norm(net)  # as SPMDStrategy does
    net = net.to(device).train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    n = batch * devices
    host = [(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)) for _ in range(4)]

    def step(i: int) -> None:
        x, y = xm.send_cpu_data_to_device(host[i % len(host)], device, sharding)
        loss, _ = masked_stats(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_xla.sync()
        xm.wait_device_ops()

    c0, s0 = compile_counters()
    for i in range(warmup):
        step(i)
    c1, s1 = compile_counters()
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        step(warmup + i)
        times.append(time.perf_counter() - t0)
    c2, _ = compile_counters()
    med = statistics.median(times)
    return {"devices": devices, "global_batch": n, "step_ms": med * 1e3, "samples_per_s": n / med,
            "compile_s": s1 - s0, "graphs": c1 - c0, "recompiles_timed": c2 - c1}


def run_one(devices: int, args) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "CPU_NUM_DEVICES", "XLA_"))}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
    cmd = [sys.executable, "-m", "xla_train.bench.replicas", "--worker", str(devices), "--batch", str(args.batch),
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {devices}-device run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16, help="per-device batch (a multiple of 8)")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (they compile)")
    p.add_argument("--devices", default="1,8", help="comma-separated device counts, one process each")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.batch, args.steps, args.warmup)))
        return 0
    from importlib.metadata import version

    print("XLA:CPU figures (PJRT_DEVICE=CPU), not TPU: the devices are threads sharing this machine's cores.")
    print(f"hardware: {cpu_summary()}; torch {version('torch')}, torch_xla {version('torch_xla')}; "
          f"{datetime.date.today().isoformat()}")
    print(f"CIFAR-10 CNN, Adam, per-device batch {args.batch}; median of {args.steps} steps after "
          f"{args.warmup} untimed warm-up steps\n")
    print(f"{'devices':>7}  {'global batch':>12}  {'step ms':>8}  {'samples/s':>9}  {'compile s':>9}  "
          f"{'graphs':>6}  {'recompiles (timed)':>18}")
    for devices in (int(d) for d in args.devices.split(",")):
        r = run_one(devices, args)
        print(f"{r['devices']:>7}  {r['global_batch']:>12}  {r['step_ms']:>8.1f}  {r['samples_per_s']:>9.1f}  "
              f"{r['compile_s']:>9.1f}  {r['graphs']:>6}  {r['recompiles_timed']:>18}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
