"""Compile time and step time of the IMDB LSTM on XLA as the sequence grows: the scan keeps compile time flat.

    python -m xla_train.bench.lstm [--maxlens 100,200,500] [--batch 128] [--steps 10] [--warmup 3]
                                   [--eager] [--unrolled 25,50]

Each (mode, maxlen) runs in its own process. `xla` is the training step the
XLA strategy runs (nn.LSTM swapped for the scan), on PJRT_DEVICE=CPU: XLA:CPU
figures on this machine, never TPU figures. `--eager` adds the same step in
eager PyTorch on the CPU (nn.LSTM over a packed sequence), the reference the
scan has to beat; `--unrolled` adds plain nn.LSTM traced on XLA, which unrolls
over time (keep its lengths small: at 200 its compile took over 5 minutes and
24 GB). The step is forward, masked BCE loss, backward, Adam and one graph cut,
on reviews padded at the front to maxlen with aclImdb-like lengths. Warm-up
steps (which compile) are outside the timed part; each timed step waits for
the device, and the median is reported.
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


def batches(batch: int, maxlen: int, vocab: int, n: int = 4):
    """Front-padded id batches whose real lengths follow aclImdb's (log-normal, median ~174 words)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        lengths = np.clip(rng.lognormal(np.log(174), 0.75, batch).astype(int), 10, maxlen)
        ids = rng.integers(2, vocab, (batch, maxlen))
        ids[np.arange(maxlen)[None, :] < (maxlen - lengths)[:, None]] = 0
        out.append((torch.from_numpy(ids), torch.from_numpy(rng.integers(0, 2, batch))))
    return out


def worker(mode: str, maxlen: int, batch: int, steps: int, warmup: int) -> dict:
    import torch
    from torch import nn

    from xla_train.models.lstm import SentimentLSTM
    from xla_train.tasks import masked_stats

    torch.manual_seed(0)
    net = SentimentLSTM()
    if mode == "eager":
        device, sync, counters = torch.device("cpu"), (lambda: None), (lambda: (0, 0.0))
    else:
        import torch_xla
        import torch_xla.core.xla_model as xm

        from torch_xla.debug import metrics as met

        from xla_train.runtime.scan_lstm import use_scan_lstm

        device = torch_xla.device()

        def counters() -> tuple[int, float]:
            """(graphs compiled, seconds spent compiling) so far in this process."""
            data = met.metric_data("CompileTime")
            return int(met.counter_value("UncachedCompile") or 0), (data[1] / 1e9 if data else 0.0)

        def sync():
            torch_xla.sync()
            xm.wait_device_ops()

        if mode == "xla":
            use_scan_lstm(net, verbose=False)
        else:  # unrolled: nn.LSTM as it is, mask ignored (all steps run)
            lstm = net.lstm
            lstm.forward = lambda x, hx=None, mask=None: nn.LSTM.forward(lstm, x, hx)
    net = net.to(device).train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    host = batches(batch, maxlen, net.config["vocab_size"])

    def step(i: int) -> None:
        x, y = (t.to(device) for t in host[i % len(host)])
        loss, _ = masked_stats(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()

    c0, s0 = counters()
    t0 = time.perf_counter()
    step(0)
    first = time.perf_counter() - t0
    for i in range(1, warmup):
        step(i)
    c1, s1 = counters()
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        step(warmup + i)
        times.append(time.perf_counter() - t0)
    c2, _ = counters()
    med = statistics.median(times)
    return {"mode": mode, "maxlen": maxlen, "batch": batch, "first_step_s": first, "compile_s": s1 - s0,
            "graphs": c1 - c0, "step_ms": med * 1e3, "samples_per_s": batch / med, "recompiles_timed": c2 - c1}


def run_one(mode: str, maxlen: int, args) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "CPU_NUM_DEVICES", "XLA_"))}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
    cmd = [sys.executable, "-m", "xla_train.bench.lstm", "--worker", mode, "--maxlens", str(maxlen),
           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"the {mode} run at maxlen {maxlen} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--maxlens", default="100,200,500", help="sequence lengths for the scan (and --eager)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (they compile)")
    p.add_argument("--eager", action="store_true", help="also time eager PyTorch on the CPU")
    p.add_argument("--unrolled", default="", help="lengths at which to time nn.LSTM unrolled on XLA, e.g. 25,50")
    p.add_argument("--timeout", type=int, default=1800, help="seconds allowed per run")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, int(args.maxlens), args.batch, args.steps, args.warmup)))
        return 0
    from importlib.metadata import version

    print("XLA:CPU figures (PJRT_DEVICE=CPU, 1 device), not TPU figures.")
    print(f"hardware: {cpu_summary()}; torch {version('torch')}, torch_xla {version('torch_xla')}; "
          f"{datetime.date.today().isoformat()}")
    print(f"SentimentLSTM (Embedding 10000x128, LSTM 32, Dense 1), Adam, batch {args.batch}; median of "
          f"{args.steps} steps after {args.warmup} untimed warm-up steps\n")
    print(f"{'mode':>8}  {'maxlen':>6}  {'compile s':>9}  {'graphs':>6}  {'1st step s':>10}  {'step ms':>8}  "
          f"{'samples/s':>9}  {'recompiles (timed)':>18}")
    runs = [("xla", int(n)) for n in args.maxlens.split(",")]
    runs += [("eager", int(n)) for n in args.maxlens.split(",")] if args.eager else []
    runs += [("unrolled", int(n)) for n in args.unrolled.split(",") if n]
    for mode, maxlen in runs:
        r = run_one(mode, maxlen, args)
        compile_s = f"{r['compile_s']:>9.1f}" if mode != "eager" else f"{'-':>9}"
        print(f"{mode:>8}  {maxlen:>6}  {compile_s}  {r['graphs']:>6}  {r['first_step_s']:>10.1f}  "
              f"{r['step_ms']:>8.1f}  {r['samples_per_s']:>9.1f}  {r['recompiles_timed']:>18}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
