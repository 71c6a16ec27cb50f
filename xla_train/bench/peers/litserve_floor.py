"""LitServe's own ceiling on this machine: a model that does nothing, batched by LitServe's own loop with `xla_train
serve`'s defaults, under the closed-loop load `bench serve` uses (wrk). What it serves is the most any model can be
served at through LitServe here, so it bounds what `bench serve` can reach against offline predict (docs/results.md,
"Serving over HTTP under load"). A peer measurement, not part of the package: `python xla_train/bench/peers/litserve_floor.py
[seconds]`.
"""

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import litserve as ls


class Noop(ls.LitAPI):
    def setup(self, device):
        pass

    def decode_request(self, request):
        return 0

    def predict(self, x):
        return [0] * len(x)

    def encode_response(self, output):
        return {"label": 0}


def serve(port: int) -> None:
    api = Noop(max_batch_size=32, batch_timeout=0.005)  # xla_train serve's defaults
    ls.LitServer(api, accelerator="cpu").run(port=port, generate_client_file=False, log_level="warning")


def main(seconds: int = 4, clients: int = 32) -> None:
    from xla_train.bench.serve import run_wrk, wrk_path, write_load  # the same load as bench serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)], stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        body = json.dumps({"image": base64.b64encode(os.urandom(1500)).decode()}).encode()  # a digit PNG's size
        with tempfile.TemporaryDirectory() as tmp:
            script = write_load(Path(tmp), [body])
            run_wrk(wrk_path(), script, port, clients, 1)  # warm-up
            w = run_wrk(wrk_path(), script, port, clients, seconds)
        print(
            f"LitServe {ls.__version__}, a no-op model, {clients} connections: {w['requests'] / w['seconds']:.0f} "
            f"requests/s, p50 {w['p50_ms']:.1f} ms ({w['socket_errors']} socket errors, {w['non_2xx']} non-2xx)"
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    else:
        main(*(int(a) for a in sys.argv[1:2]))
