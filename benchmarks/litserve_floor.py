"""LitServe's own ceiling on this machine: a model that does nothing, batched as `xla_train serve` batches, under
the closed-loop clients `bench serve` uses. What it serves is the most any model can be served at through
LitServe here, so it bounds what `bench serve` can reach against offline predict (docs/results.md, "Serving over
HTTP under load"). A peer measurement, not part of the package: `python benchmarks/litserve_floor.py [seconds]`.
"""

import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

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


def main(seconds: float = 4.0, clients: int = 32) -> None:
    from xla_train.bench.serve import load  # the same clients as bench serve

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
        now = time.perf_counter()
        results = asyncio.run(load(port, [body], clients, now + 1.0, now + 1.0 + seconds))
        ok = sum(1 for r in results if r[1] == 200)
        print(
            f"LitServe {ls.__version__}, a no-op model, {clients} clients: {ok / seconds:.0f} requests/s "
            f"({ok} of {len(results)} answered 200)"
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    else:
        main(*(float(a) for a in sys.argv[1:2]))
