"""What the serve tests share: random-weight checkpoints, digits as PNG, and a real server on loopback.

The checkpoints' last layer is scaled, so that their answers differ from input to input far more than the 1e-5
the tests hold them to, and nothing needs training.
"""

import contextlib
import http.client
import io
import json
import os
import signal
import subprocess
import sys
import time

import torch
from PIL import Image

from helpers import TESTS, cli_env, free_port, save_checkpoint
from xla_train.models import CifarCNN, SentimentLSTM
from xla_train.preprocess import text

DIGITS = {
    "kind": "image",
    "labels": [str(i) for i in range(10)],
    "image_size": 32,
    "mean": [0.5] * 3,
    "std": [0.25] * 3,
}
WORDS = "a wonderful superb film the plot was awful boring and tedious actor scene story moving mess".split()
SLOW = "net=user_nets.SlowNet"  # the key that serves a "slow" checkpoint; its workers need TESTS on PYTHONPATH


def write_checkpoint(path, arch):
    """arch: "cnn" (the Keras CIFAR-10 CNN on digits), "lstm" (a small sentiment LSTM), "slow" (user_nets.SlowNet:
    each forward takes 0.5 s)."""
    torch.manual_seed(0)
    if arch == "lstm":
        args = {"vocab_size": 100, "embed_dim": 16, "hidden_size": 8}
        net = SentimentLSTM(**args)
        tok = text.build_tokenizer([" ".join(WORDS)] * 3, 100)
        info = {"kind": "text", "labels": ["neg", "pos"], "maxlen": 40, "tokenizer": text.tokenizer_to_json(tok)}
    elif arch == "slow":
        from user_nets import SlowNet

        args = {"classes": 10, "delay": 0.5}
        net, info = SlowNet(**args), DIGITS
    else:
        net, info, args = CifarCNN(), DIGITS, {}
    with torch.no_grad():
        [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1].weight.mul_(30.0 if arch == "lstm" else 100.0)
    return save_checkpoint(path, net, args, info)


def held_out_digits(n=24):
    from xla_train.data.digits import load_digits_rgb32

    images, _ = load_digits_rgb32()
    return images[-n:]  # the end of scikit-learn's set; the checkpoints here never trained on any digit


def png(image) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


class Server:
    def __init__(self, ckpt, workdir, *keys, env=None):
        self.port = free_port()
        if SLOW in keys:  # its workers import user_nets; xla_train stays where this process has it
            env = env or cli_env(
                PYTHONPATH=os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
            )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xla_train", "serve", f"ckpt={ckpt}", f"port={self.port}", *keys],
            cwd=workdir,
            env=env or cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: the test can see, and end, every process it started
        )

    def wait_ready(self, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()
            try:
                if request(self.port, "GET", "/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("the server was not ready in time")

    def stop(self):
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # anything the server left behind

    def group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False


def request(port, method, path, body=None, conn=None):
    """One request; on a kept-alive `conn` that the server closed while it sat idle (uvicorn closes those after 5 s,
    as a loaded machine can let happen) it is sent again on a fresh connection, as HTTP clients do."""
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
    except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
        if conn is None:
            raise
        c.close()  # the next request opens a new connection
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r.status, json.loads(data) if data.startswith((b"{", b"[")) else data.decode()


def formed(port) -> dict[int, int]:
    """The batch sizes the server has formed so far, from its /info: {size: count}."""
    return {int(k): v for k, v in request(port, "GET", "/info")[1]["batching"]["batches_formed"].items()}
