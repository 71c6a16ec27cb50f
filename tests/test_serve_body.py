"""`serve`'s body limit holds however the body is framed: chunked, or with a Content-Length smaller or larger than
what comes. Each is sent as raw bytes (or by http.client, chunked) to a real server on loopback; each gets one
answer, 413 or 400, and the server serves the next request.
"""

import base64
import http.client
import json
import socket

import numpy as np
import pytest

from helpers import require
from serving import Server, held_out_digits, png, request, write_checkpoint
from xla_train.serve.predictor import load_for_inference

require("litserve")

LIMIT = 52_428  # max_body_mb=0.05
OVER = json.dumps({"image": "A" * 60_000}).encode()  # valid base64 of no image: only the limit refuses it whole
HEAD = b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve_body")
    ckpt = write_checkpoint(work / "cnn.ckpt", "cnn")
    running = Server(ckpt, work, "max_body_mb=0.05", "body_timeout=1")
    try:
        yield running.wait_ready(), load_for_inference(ckpt)
    finally:
        running.stop()


def chunks(body: bytes, size: int = 8192, last: bool = True) -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size))
    return out + (b"0\r\n\r\n" if last else b"")


def exchange(port: int, data: bytes, until_closed: bool) -> tuple[list[tuple[int, str, str]], bool]:
    """Send the bytes as they are; read the first answer, or with until_closed every answer until the server ends
    the connection. ([(status, its Connection header, body)], whether the server ended it within 15 s)."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(data)
        f = s.makefile("rb")
        try:
            while line := f.readline():
                headers = {}
                while (header := f.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = f.read(int(headers.get("content-length", 0))).decode()
                answers.append((int(line.split()[1]), headers.get("connection", ""), body))
                if not until_closed:
                    return answers, False
        except (TimeoutError, ConnectionResetError) as e:
            return answers, isinstance(e, ConnectionResetError)
    return answers, True


def answers_as_offline(server) -> None:
    """The server still serves: a digit, sent plainly, gets offline predict's answer."""
    running, offline = server
    digit = held_out_digits(1)
    status, answer = request(
        running.port, "POST", "/predict", json.dumps({"image": base64.b64encode(png(digit[0])).decode()})
    )
    assert status == 200, answer
    np.testing.assert_allclose(answer["probabilities"], offline.probabilities(digit)[0].numpy(), atol=1e-5, rtol=0)


def test_a_chunked_body_over_the_limit_is_413_and_the_connection_goes_on(server):
    """http.client sends the whole body chunked, then reads: 413, and the same connection serves a chunked digit."""
    running, offline = server
    digit = held_out_digits(1)
    body = json.dumps({"image": base64.b64encode(png(digit[0])).decode()}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=30)  # idle for 5 s, uvicorn closes it
    headers = {"Content-Type": "application/json"}
    conn.request("POST", "/predict", body=(OVER[i : i + 8192] for i in range(0, len(OVER), 8192)), headers=headers)
    r = conn.getresponse()
    answer = json.loads(r.read())
    assert r.status == 413 and f"over the limit of {LIMIT:,} bytes" in answer["detail"], (r.status, answer)
    conn.request("POST", "/predict", body=iter([body[:100], body[100:]]), headers=headers, encode_chunked=True)
    r = conn.getresponse()
    answer = json.loads(r.read())
    assert r.status == 200, answer
    np.testing.assert_allclose(answer["probabilities"], offline.probabilities(digit)[0].numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "data, status, detail, closes",
    [
        # over the limit chunked, its last chunk never sent: refused at the limit, not at the end
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks(OVER, last=False), 413, "over the limit", False),
        # a Content-Length over the limit and a body short of it: refused on the header, no byte awaited
        (HEAD + b"Content-Length: %d\r\n\r\n" % (LIMIT + 1) + OVER[:1000], 413, "over the limit", False),
        # a Content-Length under the limit and a body short of it: refused once it stalls, the connection closed
        (HEAD + b"Content-Length: 5000\r\n\r\n" + OVER[:1000], 400, "stopped at 1,000 bytes of the 5,000", True),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks(OVER[:1000], last=False), 400, "stopped at 1,000", True),
        # a Content-Length smaller than the body: what follows it is no request (uvicorn's 400), and is never read
        # as a body; the connection closed
        (HEAD + b"Content-Length: 100\r\n\r\n" + OVER, 400, "", True),
    ],
    ids=[
        "chunked-over-unfinished",
        "length-over-body-short",
        "length-under-body-short",
        "chunked-unfinished",
        "length-short",
    ],
)
def test_a_body_framed_to_slip_past_the_limit_is_refused_and_the_server_serves_on(server, data, status, detail, closes):
    running, _ = server
    answers, closed = exchange(running.port, data, until_closed=closes)
    assert answers and all(s == status for s, _, _ in answers), answers
    assert detail in answers[0][2] and "\n" not in answers[0][2], answers
    assert (answers[-1][1] == "close", closed) == (closes, closes), answers  # said so, and did
    answers_as_offline(server)
