"""`bench serve`: the HTTP server under closed-loop load from wrk on loopback, batched on the fly against one at a time.

The load is wrk (C, one thread, one keep-alive connection per client, the next request sent when the last is
answered): clients in Python took so much of a 2-core machine's CPU from the server they measured that they
measured themselves. Every max_batch_size gets its own server, all started at once, and each cell (clients x
server) runs `rounds` times with the servers taken in turn, so that a change in the machine's load falls on all
of them alike; the table shows each cell's median. Beside requests/s and latency stand the CPU the server's
processes and wrk used, the batch sizes the server formed (its /info) and the errors wrk counted. Correctness
under load is tests/test_serve.py's: every answer there is held to offline predict. docs/serving.md, "Under load".
"""

from __future__ import annotations

import base64
import io
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from xla_train.bench import report
from xla_train.bench.predict import raw_inputs
from xla_train.bench.timing import time_calls
from xla_train.errors import UserError
from xla_train.serve.predictor import load_for_inference

COLUMNS = [
    "max_batch_size",
    "concurrency",
    "round",
    "requests",
    "requests_per_s",
    "p50_ms",
    "p99_ms",
    "server_cpu_pct",
    "wrk_cpu_pct",
    "batches_formed",
    "socket_errors",
    "non_2xx",
    "idle_cpu_pct",
]

# POSTs the file's bodies (one per line) in turn; at the end, one line of JSON with what wrk counted
WRK_SCRIPT = r"""
local bodies, i = {}, 0
function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = wrk.format("POST", "/predict", {["Content-Type"] = "application/json"}, line)
  end
end
function request()
  i = i % #bodies + 1
  return bodies[i]
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK {"requests": %d, "seconds": %.6f, "socket_errors": %d, "non_2xx": %d, ' ..
    '"p50_ms": %.3f, "p99_ms": %.3f}\n', summary.requests, summary.duration / 1e6,
    e.connect + e.read + e.write + e.timeout, e.status, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3))
end
"""


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise UserError(
            "bench serve measures with wrk, which is not on PATH: apt-get install wrk (Debian, Ubuntu), "
            "brew install wrk (macOS), or build it from github.com/wg/wrk"
        )
    return path


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


def write_load(folder: Path, bodies: list[bytes]) -> Path:
    """wrk's script and the bodies file it reads; the script's path."""
    (folder / "bodies.txt").write_bytes(b"\n".join(bodies) + b"\n")
    (folder / "post.lua").write_text(WRK_SCRIPT)
    return folder / "post.lua"


def run_wrk(wrk: str, script: Path, port: int, connections: int, seconds: int) -> dict:
    """One closed-loop run of wrk: its JSON line, with the CPU seconds wrk itself used (its rusage)."""
    url = f"http://127.0.0.1:{port}/predict"
    cmd = [wrk, "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "-s", str(script), url]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [*cmd, "--", str(script.parent / "bodies.txt")], capture_output=True, text=True, timeout=seconds + 60
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in done.stdout.splitlines() if x.startswith("WRK ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")
    out = json.loads(line[4:])
    out["wrk_cpu_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return out


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


def launch(ckpt: str, max_batch_size: int, batch_timeout: float) -> tuple[subprocess.Popen, int]:
    from xla_train.bench.cell import free_port

    port = free_port()
    keys = [f"ckpt={ckpt}", f"port={port}", f"max_batch_size={max_batch_size}", f"batch_timeout={batch_timeout}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "xla_train", "serve", *keys], stdout=subprocess.DEVNULL, start_new_session=True
    )
    return proc, port


def wait_ready(proc: subprocess.Popen, port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the server on port {port} did not become ready")


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of pid and its descendants (/proc): the server's HTTP process, queue manager and workers."""
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


def cell(wrk, script, proc, port, mbs: int, clients: int, r: int, seconds: int, warmup: int, idle: float) -> dict:
    if warmup:
        run_wrk(wrk, script, port, clients, warmup)
    formed0 = get(port, "/info")["batching"]["batches_formed"]
    cpu0, t0 = tree_cpu_seconds(proc.pid), time.monotonic()
    w = run_wrk(wrk, script, port, clients, seconds)
    cpu, wall = tree_cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
    formed = {int(k): v - formed0.get(k, 0) for k, v in get(port, "/info")["batching"]["batches_formed"].items()}
    return {
        "max_batch_size": mbs,
        "concurrency": clients,
        "round": r,
        "requests": w["requests"],
        "requests_per_s": w["requests"] / w["seconds"],
        "p50_ms": w["p50_ms"],
        "p99_ms": w["p99_ms"],
        "server_cpu_pct": 100 * cpu / wall,
        "wrk_cpu_pct": 100 * w["wrk_cpu_s"] / wall,
        "batches_formed": " ".join(f"{k}:{v}" for k, v in sorted(formed.items()) if v),
        "formed": formed,
        "socket_errors": w["socket_errors"],
        "non_2xx": w["non_2xx"],
        "idle_cpu_pct": idle,
    }


def serve(
    ckpt: str,
    concurrency: list[PositiveInt] = [1, 8, 32],
    max_batch_sizes: list[PositiveInt] = [1, 32],
    batch_timeout: float = 0.005,
    seconds: PositiveInt = 4,
    warmup: NonNegativeInt = 1,
    rounds: PositiveInt = 3,
    idle_seconds: PositiveFloat = 3.0,
    runs_dir: str = "runs",
    command: str = "",
) -> tuple[int, Path]:
    """concurrency: wrk's connections per cell; max_batch_sizes: one server each (1 = no batching); seconds and
    warmup: whole seconds of each wrk run; rounds: runs per cell, the servers taken in turn."""
    import torch

    wrk = wrk_path()
    predictor = load_for_inference(ckpt)
    batch = raw_inputs(predictor, 32)
    ceiling = 32 / statistics.median(time_calls([lambda: predictor.probabilities(batch, batch_size=32)], 30, 3)[0])
    servers = {mbs: launch(ckpt, mbs, batch_timeout) for mbs in dict.fromkeys(max_batch_sizes)}
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            script = write_load(Path(tmp), bodies_of(predictor, 64))
            for proc, port in servers.values():
                wait_ready(proc, port)
            before, t0 = {m: tree_cpu_seconds(p.pid) for m, (p, _) in servers.items()}, time.monotonic()
            time.sleep(idle_seconds)
            idle = {
                m: 100 * (tree_cpu_seconds(p.pid) - before[m]) / (time.monotonic() - t0)
                for m, (p, _) in servers.items()
            }
            for clients in concurrency:
                for r in range(rounds):
                    for mbs, (proc, port) in servers.items():
                        rows.append(cell(wrk, script, proc, port, mbs, clients, r, seconds, warmup, idle[mbs]))
    finally:
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)  # each server drains and stops its own processes
        for proc, _ in servers.values():
            proc.wait(timeout=60)
    return publish(rows, predictor, ckpt, ceiling, batch_timeout, seconds, warmup, rounds, command, runs_dir, torch)


def summary(rows: list[dict]) -> dict[tuple, dict]:
    """(max_batch_size, concurrency) -> each figure's median over the rounds, the batches and errors summed."""
    cells: dict[tuple, list] = {}
    for r in rows:
        cells.setdefault((r["max_batch_size"], r["concurrency"]), []).append(r)
    out = {}
    for key, runs in cells.items():
        med = {c: statistics.median(r[c] for r in runs) for c in ("requests_per_s", "p50_ms", "p99_ms")}
        med |= {c: statistics.median(r[c] for r in runs) for c in ("server_cpu_pct", "wrk_cpu_pct", "idle_cpu_pct")}
        formed = {}
        for r in runs:
            for k, v in r["formed"].items():
                formed[k] = formed.get(k, 0) + v
        med["mean_batch"] = sum(k * v for k, v in formed.items()) / max(1, sum(formed.values()))
        med["largest"] = max((k for k, v in formed.items() if v), default=0)
        med["errors"] = sum(r["socket_errors"] + r["non_2xx"] for r in runs)
        out[key] = med
    return out


def publish(rows, predictor, ckpt, ceiling, batch_timeout, seconds, warmup, rounds, command, runs_dir, torch):
    cells = summary(rows)
    notes = [
        f"checkpoint {ckpt}: {predictor.net_name} ({predictor.kind}); inputs: 64 "
        + ("synthetic reviews" if predictor.kind == "text" else "random images as PNG, base64 in JSON"),
        f"wrk -t1, closed loop on loopback: {rounds} round(s) of {seconds} s per cell after {warmup} s of warm-up, "
        f"the servers taken in turn; each figure is the median round; batch_timeout={batch_timeout}",
        "CPU: % of one core, over the timed seconds; server = its HTTP process, queue manager and worker(s); "
        "idle = the server's processes before any load",
        f"offline predict at batch 32 (this process, preprocessing included): {ceiling:,.0f} samples/s (the ceiling)",
        "errors: wrk's socket errors and non-2xx answers; correctness under load is tests/test_serve.py's",
    ]
    top, low = max(c for _, c in cells), min(c for _, c in cells)
    for mbs in sorted({m for m, _ in cells} - {1}) if (1, top) in cells else []:  # the goals: batching pays at
        rate = cells[mbs, top]["requests_per_s"] / cells[1, top]["requests_per_s"]  # many clients, costs none at one
        wait = cells[mbs, low]["p50_ms"] / cells[1, low]["p50_ms"]
        notes.append(
            f"max_batch_size={mbs} against 1: {rate:.2f}x the requests/s at {top} clients, {wait:.2f}x the p50 at {low}"
        )
    headers = ["max_batch_size", "clients", "requests/s", "p50 ms", "p99 ms", "server CPU %", "wrk CPU %"]
    headers += ["mean batch", "largest batch", "errors", "idle CPU %"]
    table = [
        [
            mbs,
            clients,
            report.fmt(c["requests_per_s"], 0),
            report.fmt(c["p50_ms"], 1),
            report.fmt(c["p99_ms"], 1),
            report.fmt(c["server_cpu_pct"], 0),
            report.fmt(c["wrk_cpu_pct"], 0),
            report.fmt(c["mean_batch"], 1),
            c["largest"],
            c["errors"],
            report.fmt(c["idle_cpu_pct"], 1),
        ]
        for (mbs, clients), c in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]
    prov = report.provenance(command, [f"CPU, PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s)"])
    prov["offline ceiling"] = f"{ceiling:.1f} samples/s, predict at batch 32 in this process, preprocessing included"
    run_dir = report.new_run_dir(runs_dir)
    report.publish(run_dir, "serve", "xla_train serve under load (wrk)", prov, rows, COLUMNS, headers, table, notes)
    return (1 if any(r["socket_errors"] or r["non_2xx"] for r in rows) else 0), run_dir
