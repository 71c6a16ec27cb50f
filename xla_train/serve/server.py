"""`serve`: a checkpoint behind LitServe, batched on the fly, stopped without dropping a request.

LitServe runs the HTTP front (uvicorn) and the model workers (spawned processes). Three things it lacks are
added here around it, not in place of it: a batching loop that decodes each request apart (a bad one is
answered alone) and blocks on its queue instead of polling it (an idle server sleeps); SIGTERM handled as
Ctrl+C is, so in-flight requests finish within DRAIN_S before the workers stop; and the checkpoint and the
port checked in this process first, so a bad one is one line and exit 2 before anything starts.
docs/serving.md, "Serve over HTTP", has the interface and the measurements.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import threading
import time
from pathlib import Path

from xla_train.errors import ConfigError, UserError
from xla_train.serve.http import BodyGate, describe_input
from xla_train.serve.predictor import load_for_inference

DRAIN_S = 10.0  # in-flight requests get this long to finish after SIGTERM or Ctrl+C
HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # what LitServer.run accepts
OWNER = 0  # the pid that serves; its SIGTERM drains


def litserve():
    try:
        import litserve as ls
    except ImportError:
        raise UserError("serve needs LitServe: pip install 'xla_train[serve]'") from None
    return ls


def check_address(host: str, port: int) -> None:
    """Refuse a host LitServe cannot bind or a port already taken, before any process starts."""
    if host not in HOSTS:
        raise ConfigError(
            f"host={host}: LitServe listens on one of {', '.join(HOSTS)}; use host=127.0.0.1 (this machine)"
        )
    if not 1024 <= port <= 65535:
        raise ConfigError(f"port={port} must be in 1024..65535 (LitServe's range)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            s.bind((host, port))
        except OSError as e:
            raise ConfigError(
                f"port {port} on {host} is taken ({e.strerror}); stop what listens there or give another port="
            ) from None


def worker_threads(threads: int | str, workers: int) -> int:
    """Each worker's compute threads: as given, or (auto) this process's cores less one, which the HTTP front and
    LitServe's queues need, shared among the workers. Given every core, a worker's threads spin between batches
    and take the CPU the front needs to hand them requests (docs/results.md, "Serving over HTTP under load")."""
    if threads != "auto":
        return int(threads)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, (cores - 1) // workers)


def info(ckpt, recipe, predictor, settings: dict, counts) -> dict:
    net = predictor.model
    return {
        "checkpoint": str(Path(ckpt).resolve()),
        "recipe": recipe,
        "model": {
            "net": predictor.net_name,
            "init_args": predictor.init_args,
            "parameters": sum(p.numel() for p in net.parameters()),
            "labels": predictor.labels,
        },
        "input": describe_input(predictor),
        "batching": {**settings, "batches_formed": {str(n): c for n, c in enumerate(counts[:]) if c}},
    }


def serve(
    ckpt: str,
    host: str,
    port: int,
    max_batch_size: int,
    batch_timeout: float,
    workers: int,
    max_body_mb: float,
    body_timeout: float,
    threads: int | str,
    net=None,
    net_args: dict | None = None,
    recipe: str | None = None,
) -> int:
    """Serve until SIGTERM or Ctrl+C; then finish the requests in flight and return 0. The keys' defaults and
    checks are cli/serve.py's typed signature, which the command line and xla_train.serve() both read. `net`
    (a class path, or a class the workers can import) names a checkpoint's own net."""
    # a bad or unsafe checkpoint, or a user's net not named: one line, before anything starts
    predictor = load_for_inference(ckpt, net=net, args=net_args)
    check_address(host, port)
    ls = litserve()
    from xla_train.serve.worker import PredictorAPI

    counts = mp.get_context("spawn").Array("q", max_batch_size + 1)  # batches formed, by size
    threads = worker_threads(threads, workers)
    api = PredictorAPI(
        str(ckpt),
        counts,
        threads,
        net=net,
        net_args=net_args,
        max_batch_size=max_batch_size,
        batch_timeout=batch_timeout,
    )
    max_bytes = int(max_body_mb * 2**20)
    server = ls.LitServer(
        api,
        accelerator="cpu",
        workers_per_device=workers,
        info_path="/litserve/info",
        middlewares=[(BodyGate, {"max_bytes": max_bytes, "timeout": body_timeout})],
    )
    server.uvicorn_graceful_timeout = DRAIN_S
    settings = dict(
        max_batch_size=max_batch_size,
        batch_timeout=batch_timeout,
        workers=workers,
        threads=threads,
        max_body_bytes=max_bytes,
        body_timeout=body_timeout,
    )
    server.app.add_api_route("/info", lambda: info(ckpt, recipe, predictor, settings, counts), methods=["GET"])
    url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    threading.Thread(target=announce, args=(url, predictor, settings), daemon=True).start()
    global OWNER
    OWNER = os.getpid()
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(host=host, port=port, log_level="warning", generate_client_file=False)
    except KeyboardInterrupt:  # before LitServe's own handling began (still starting): stop what it started
        for worker in getattr(server, "inference_workers", []):
            worker.terminate()
        if server.transport_config.manager is not None:
            server.transport_config.manager.shutdown()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("xla_train serve: stopped", flush=True)
    return 0


def interrupt(signum, frame):
    """SIGTERM becomes the KeyboardInterrupt LitServer.run answers by draining; later signals are ignored. A
    process forked from this one (uvicorn's, which re-raises the signal once it has drained) just ends."""
    if os.getpid() != OWNER:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(
        f"xla_train serve: {signal.Signals(signum).name}: finishing requests in flight (up to {DRAIN_S:.0f} s)",
        flush=True,
    )
    raise KeyboardInterrupt


def announce(url: str, predictor, settings: dict) -> None:
    """Say 'ready' once /health answers 200: the model is loaded in every worker."""
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.1)
    what = f"{predictor.net_name} ({predictor.kind}, {len(predictor.labels)} classes)"
    batching = ", ".join(f"{k}={v}" for k, v in settings.items())
    print(f"xla_train serve: ready on {url}: POST /predict, GET /health, GET /info; {what}; {batching}", flush=True)
