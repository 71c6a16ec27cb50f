"""`bench serve`: the HTTP server under closed-loop load on loopback, batched on the fly against one at a time.

Each max_batch_size gets a fresh `serve` process; at each concurrency, that many clients (asyncio, one keep-alive
connection each) send the next request as soon as the last is answered, for `seconds` after `warmup`. Every
answer is checked against offline probabilities (so a lost, swapped or failed answer is counted, never averaged
in), the server's own /info says which batch sizes it formed, and offline predict at batch 32 in this process is
the model's ceiling on this machine. Clients and server share the CPU (docs/serving.md, "Serve over HTTP").
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from jsonargparse.typing import PositiveFloat, PositiveInt

from xla_train.bench import report
from xla_train.bench.predict import raw_inputs
from xla_train.bench.timing import percentile, time_calls
from xla_train.serve.predictor import load_for_inference

COLUMNS = [
    "max_batch_size",
    "concurrency",
    "requests",
    "requests_per_s",
    "p50_ms",
    "p99_ms",
    "mean_batch",
    "batches_formed",
    "lost",
    "wrong",
    "http_5xx",
    "http_other",
    "idle_cpu_pct",
]


def bodies_of(predictor, n: int) -> list[bytes]:
    from PIL import Image

    raw = raw_inputs(predictor, n)
    if predictor.kind == "text":
        return [json.dumps({"text": t}).encode() for t in raw]
    out = []
    for image in raw:
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="PNG")
        out.append(json.dumps({"image": base64.b64encode(buf.getvalue()).decode()}).encode())
    return out


async def post(reader, writer, body: bytes) -> tuple[int, bytes]:
    head = b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return status, await reader.readexactly(length)


async def load(port: int, bodies, concurrency: int, start: float, end: float) -> list[tuple]:
    """(input index, status, answer, t0, t1) of every request a client began before `end`; None status: lost."""
    results = []

    async def client(k: int):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        i = k
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            try:
                status, data = await post(reader, writer, bodies[i % len(bodies)])
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                results.append((i % len(bodies), None, b"", t0, time.perf_counter()))
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            results.append((i % len(bodies), status, data, t0, time.perf_counter()))
            i += concurrency
        writer.close()

    await asyncio.gather(*(client(k) for k in range(concurrency)))
    return [r for r in results if r[3] >= start]


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


def start_server(ckpt: str, max_batch_size: int, batch_timeout: float) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    keys = [f"ckpt={ckpt}", f"port={port}", f"max_batch_size={max_batch_size}", f"batch_timeout={batch_timeout}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "xla_train", "serve", *keys], stdout=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server (max_batch_size={max_batch_size}) did not become ready")


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of pid and its descendants (/proc), for the idle measure."""
    tick, total, todo = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
    return total


def serve(
    ckpt: str,
    concurrency: list[PositiveInt] = [1, 8, 32],
    max_batch_sizes: list[PositiveInt] = [1, 32],
    batch_timeout: float = 0.005,
    seconds: PositiveFloat = 4.0,
    warmup: PositiveFloat = 1.0,
    idle_seconds: PositiveFloat = 3.0,
    runs_dir: str = "runs",
    command: str = "",
) -> tuple[int, Path]:
    """concurrency: closed-loop clients per cell; max_batch_sizes: one server each (1 = no batching)."""
    import numpy as np
    import torch

    predictor = load_for_inference(ckpt)
    raw, bodies = raw_inputs(predictor, 64), bodies_of(predictor, 64)
    expected = predictor.probabilities(raw).numpy()
    batch = raw[:32]
    ceiling = 32 / statistics.median(time_calls([lambda: predictor.probabilities(batch, batch_size=32)], 30, 3)[0])
    rows = []
    for mbs in max_batch_sizes:
        proc, port = start_server(ckpt, mbs, batch_timeout)
        try:
            before, t0 = tree_cpu_seconds(proc.pid), time.monotonic()
            time.sleep(idle_seconds)
            idle = 100 * (tree_cpu_seconds(proc.pid) - before) / (time.monotonic() - t0)
            for c in concurrency:
                formed0 = get(port, "/info")["batching"]["batches_formed"]
                start = time.perf_counter() + warmup
                done = asyncio.run(load(port, bodies, c, start, start + seconds))
                formed = {
                    int(k): v - formed0.get(k, 0) for k, v in get(port, "/info")["batching"]["batches_formed"].items()
                }
                formed = {k: v for k, v in sorted(formed.items()) if v}
                ok = [(i, json.loads(d)) for i, s, d, _, _ in done if s == 200]
                wrong = sum(1 for i, a in ok if np.abs(np.asarray(a["probabilities"]) - expected[i]).max() > 1e-5)
                lat = [t1 - t0 for _, s, _, t0, t1 in done if s == 200] or [float("nan")]
                span = max(t1 for *_, t1 in done) - start if done else float("nan")
                rows.append(
                    {
                        "max_batch_size": mbs,
                        "concurrency": c,
                        "requests": len(done),
                        "requests_per_s": len(ok) / span,
                        "p50_ms": percentile(lat, 0.5) * 1e3,
                        "p99_ms": percentile(lat, 0.99) * 1e3,
                        "mean_batch": sum(k * v for k, v in formed.items()) / max(1, sum(formed.values())),
                        "batches_formed": " ".join(f"{k}:{v}" for k, v in formed.items()),
                        "lost": sum(1 for r in done if r[1] is None),
                        "wrong": wrong,
                        "http_5xx": sum(1 for r in done if r[1] and r[1] >= 500),
                        "http_other": sum(1 for r in done if r[1] and r[1] != 200 and r[1] < 500),
                        "idle_cpu_pct": idle,
                    }
                )
        finally:
            proc.send_signal(signal.SIGTERM)  # the server drains and stops its own processes
            proc.wait(timeout=60)
    return publish(rows, predictor, ckpt, ceiling, batch_timeout, seconds, warmup, command, runs_dir, torch)


def publish(rows, predictor, ckpt, ceiling, batch_timeout, seconds, warmup, command, runs_dir, torch):
    by = {(r["max_batch_size"], r["concurrency"]): r for r in rows}
    top = max(r["concurrency"] for r in rows)
    best, one = by.get((max(r["max_batch_size"] for r in rows), top)), by.get((1, top))
    notes = [
        f"checkpoint {ckpt}: {predictor.net_name} ({predictor.kind}); inputs: 64 "
        + ("synthetic reviews" if predictor.kind == "text" else "random images as PNG, base64 in JSON"),
        f"closed loop on loopback, {seconds:g} s timed after {warmup:g} s of warm-up per cell; batch_timeout={batch_timeout}",
        f"offline predict at batch 32 (this process, preprocessing included): {ceiling:,.0f} samples/s (the ceiling)",
        "wrong: an answer more than 1e-5 from the offline probabilities of its input; lost: no HTTP answer",
        "idle_cpu_pct: the server's processes over the idle seconds before the load, % of one core",
    ]
    if best and one and best is not one:
        notes.append(
            f"at concurrency {top}: batching serves {best['requests_per_s'] / one['requests_per_s']:.2f}x the requests/s "
            f"of max_batch_size=1, and {best['requests_per_s'] / ceiling:.0%} of offline predict's samples/s"
        )
    headers = [
        "max_batch_size",
        "clients",
        "requests/s",
        "p50 ms",
        "p99 ms",
        "mean batch",
        "batches formed (size:count)",
        "lost",
        "wrong",
        "5xx",
        "idle CPU %",
    ]
    table = [
        [
            r["max_batch_size"],
            r["concurrency"],
            report.fmt(r["requests_per_s"], 0),
            report.fmt(r["p50_ms"], 1),
            report.fmt(r["p99_ms"], 1),
            report.fmt(r["mean_batch"], 1),
            r["batches_formed"],
            r["lost"],
            r["wrong"],
            r["http_5xx"],
            report.fmt(r["idle_cpu_pct"], 1),
        ]
        for r in rows
    ]
    prov = report.provenance(command, [f"CPU, PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s)"])
    run_dir = report.new_run_dir(runs_dir)
    report.publish(run_dir, "serve", "xla_train serve under load", prov, rows, COLUMNS, headers, table, notes)
    bad = any(r["lost"] or r["wrong"] or r["http_5xx"] for r in rows)
    return (1 if bad else 0), run_dir
