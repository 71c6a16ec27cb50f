"""`serve`: real servers on loopback answer as offline predict does, refuse bad requests alone, batch only what is
queued or coming, and drain on SIGTERM.

Three servers start once for the module: a digits CNN, a small text LSTM, and a net whose every forward takes 0.5 s
(user_nets.SlowNet), so that requests surely queue behind a batch, and surely are in flight when SIGTERM comes.
The checkpoints are random-weight ones (serving.py).
"""

import base64
import http.client
import json
import queue
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import numpy as np
import pytest
import torch

from helpers import require
from serving import SLOW, Server, formed, held_out_digits, png, request, write_checkpoint
from xla_train.bench.serve import tree_cpu_seconds  # the bench's idle measure, the same /proc sums
from xla_train.cli.main import main
from xla_train.serve.inputs import read_images
from xla_train.serve.predictor import load_for_inference

require("litserve")

REVIEWS = [
    "A wonderful, superb film.<br />Moving!",
    "the plot was awful and boring",
    "tedious mess " * 40,
    "An actor, a scene, a story: superb.",
    "Nothing here is in the vocabulary",
]
MAX_BODY_MB = 0.05  # 52,428 bytes: a 32x32 PNG is about 3 KB
LONG_WAIT = 20.0  # the slow server's batch_timeout: a lone request that waited for company would take this long


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    cnn, lstm = write_checkpoint(work / "cnn.ckpt", "cnn"), write_checkpoint(work / "lstm.ckpt", "lstm")
    slow = write_checkpoint(work / "slow.ckpt", "slow")
    running = {
        "image": Server(cnn, work, f"max_body_mb={MAX_BODY_MB}"),
        "text": Server(lstm, work),
        "slow": Server(slow, work, SLOW, f"batch_timeout={LONG_WAIT}"),  # the SIGTERM test, the last to use it, ends it
    }
    try:
        yield {name: s.wait_ready() for name, s in running.items()}, {"image": cnn, "text": lstm, "slow": slow}, work
    finally:
        for s in running.values():
            s.stop()


def test_a_start_that_cannot_serve_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = write_checkpoint(tmp_path / "cnn.ckpt", "cnn")
    torch.save({"state_dict": {}, "hook": print}, tmp_path / "unsafe.ckpt")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            ([f"ckpt={tmp_path / 'unsafe.ckpt'}"], "unsafe.ckpt is unsafe"),
            ([f"ckpt={tmp_path / 'missing.ckpt'}"], "does not exist"),
            ([f"ckpt={ckpt}", f"port={port}"], f"port {port} on 127.0.0.1 is taken"),
            ([f"ckpt={ckpt}", "port=80"], "port=80 must be in 1024..65535"),
            ([f"ckpt={ckpt}", "host=example.com"], "use host=127.0.0.1"),
            ([f"ckpt={ckpt}", "max_batch_size=0"], "max_batch_size"),
            ([f"ckpt={ckpt}", "batch_timout=0.1"], "did you mean batch_timeout"),
        ]
        for args, message in cases:
            assert main(["serve", *args]) == 2, args
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and message in err[0], (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.ckpt", "unsafe.ckpt"]  # nothing written


def test_concurrent_clients_get_offline_answers_and_bad_requests_are_refused_alone(servers):
    """16 clients x 20 requests: digits as PNG, reviews against the text model, and every kind of bad request."""
    running, ckpts, _ = servers
    offline = {kind: load_for_inference(ckpts[kind]) for kind in ("image", "text")}
    digits = held_out_digits()
    good = [("image", {"image": base64.b64encode(png(d)).decode()}, ("image", i)) for i, d in enumerate(digits)]
    good += [("text", {"text": r}, ("text", i)) for i, r in enumerate(REVIEWS)]
    expected = {("image", i): offline["image"].probabilities(digits[i : i + 1])[0] for i in range(len(digits))}
    expected |= {("text", i): offline["text"].probabilities([r])[0] for i, r in enumerate(REVIEWS)}
    big = json.dumps({"image": "A" * int(MAX_BODY_MB * 2**20 + 4)})
    bad = [
        ("image", "{not json", 400, "the body is not JSON"),
        ("image", json.dumps({}), 400, 'missing field "image"'),
        ("image", json.dumps({"text": "a film"}), 400, 'classifies images: send "image"'),
        ("text", json.dumps({"image": "aGk="}), 400, 'classifies texts: send "text"'),
        ("image", json.dumps({"image": "not base64!"}), 400, "is not valid base64"),
        ("image", json.dumps({"image": base64.b64encode(b"GIF89a no image").decode()}), 400, "is not a readable image"),
        ("text", json.dumps({"text": "   "}), 400, '"text" is empty'),
        ("text", json.dumps({"text": "<br /><br />"}), 400, "has no words once tokenised"),
        ("image", big, 413, "over the limit"),
    ]

    def client(k):
        conns = {kind: http.client.HTTPConnection("127.0.0.1", running[kind].port, timeout=30) for kind in offline}
        results = []
        for j in range(20):
            n = k * 20 + j
            if n % 4 == 3:
                kind, body, status, message = bad[n // 4 % len(bad)]
                results.append(("bad", status, message, request(running[kind].port, "POST", "/predict", body)))
            else:
                kind, body, key = good[(n * 7) % len(good)]
                results.append(("good", key, None, request(0, "POST", "/predict", json.dumps(body), conns[kind])))
        return results

    with ThreadPoolExecutor(16) as pool:
        results = [r for rs in pool.map(client, range(16)) for r in rs]
    assert len(results) == 320
    for what, key, message, (status, answer) in results:
        if what == "bad":
            assert status == key and message in answer["detail"] and "\n" not in answer["detail"], (key, answer)
            continue
        assert status == 200, answer
        want = expected[key]
        labels = offline[key[0]].labels
        assert answer["label"] == int(want.argmax()) and answer["class"] == labels[answer["label"]]
        np.testing.assert_allclose(answer["probabilities"], want.numpy(), atol=1e-5, rtol=0)
    sizes = formed(running["image"].port)
    assert max(sizes) > 1, sizes  # requests were batched, bad ones among good ones


def test_a_lone_client_is_answered_at_once_and_concurrent_ones_are_batched(servers):
    """The slow server may wait up to LONG_WAIT for a batch to fill. One client at a time: nothing is queued and
    nobody else is coming, so each request is a batch of 1, answered in its 0.5 s forward. Eight at once, twice
    each: the requests sent while a batch is in its forward queue behind it and are batched, and the last batch,
    short of the one before by the client that already finished, is not held for it. Each answer is offline
    predict's."""
    running, ckpts, _ = servers
    port = running["slow"].port
    from user_nets import SlowNet

    offline = load_for_inference(ckpts["slow"], net=SlowNet).probabilities(held_out_digits(8))
    bodies = [json.dumps({"image": base64.b64encode(png(d)).decode()}) for d in held_out_digits(8)]

    def check(i, status, answer):
        assert status == 200, answer
        np.testing.assert_allclose(answer["probabilities"], offline[i].numpy(), atol=1e-5, rtol=0)

    before, conn = formed(port), http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(4):
        t0 = time.monotonic()
        check(i, *request(port, "POST", "/predict", bodies[i], conn))
        took = time.monotonic() - t0
        assert took < LONG_WAIT / 2, f"a lone request took {took:.1f} s: it waited for a batch that was not coming"
    lone = {k: v - before.get(k, 0) for k, v in formed(port).items() if v - before.get(k, 0)}
    assert lone == {1: 4}, lone

    start = Barrier(8)

    def client(i):
        start.wait()
        return [(i, *request(port, "POST", "/predict", bodies[i])) for _ in range(2)]

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = [a for rs in pool.map(client, range(8)) for a in rs]
    took = time.monotonic() - t0
    for answer in answers:
        check(*answer)
    together = {k: v - before.get(k, 0) - lone.get(k, 0) for k, v in formed(port).items()}
    assert sum(k * v for k, v in together.items()) == 16, together  # each request in exactly one batch
    assert took < LONG_WAIT / 2, f"8 clients took {took:.1f} s ({together}): a batch waited for one that never came"
    assert max(k for k, v in together.items() if v) > 1, together


def test_a_bad_request_in_a_batch_fails_only_itself(servers):
    """The worker's loop, given one batch of good and bad requests together: each gets its own answer."""
    import multiprocessing as mp

    from litserve.utils import LitAPIStatus

    from xla_train.serve.worker import PerItemLoop, PredictorAPI

    _, ckpts, _ = servers
    api = PredictorAPI(
        str(ckpts["image"]), mp.Array("q", 9), torch.get_num_threads(), max_batch_size=8, batch_timeout=0.0
    )
    api.setup("cpu")
    signal.signal(signal.SIGINT, signal.default_int_handler)  # setup() ignored it, as a worker does
    digits = held_out_digits(3)
    bodies = [
        {"image": base64.b64encode(png(digits[0])).decode()},
        {"image": "%%%"},
        {"image": base64.b64encode(png(digits[1])).decode()},
        {"text": "a film"},
        {"image": base64.b64encode(b"\x89PNG broken").decode()},
        {"image": base64.b64encode(png(digits[2])).decode()},
    ]
    requests = queue.Queue()
    for i, body in enumerate(bodies):
        requests.put((0, f"uid{i}", time.monotonic(), body))
    sent = {}

    class Transport:
        def send(self, item, consumer_id):
            uid, (data, status, _, _) = item
            sent[uid] = (data, status)

    PerItemLoop().run(api, "cpu", 0, requests, Transport(), {}, None)
    assert list(api.counts) == [0, 0, 0, 0, 0, 0, 1, 0, 0]  # one batch of all six
    offline = load_for_inference(ckpts["image"]).probabilities(digits)
    for i, row in zip((0, 2, 5), offline):
        data, status = sent[f"uid{i}"]
        assert status == LitAPIStatus.OK
        np.testing.assert_allclose(data["probabilities"], row.numpy(), atol=1e-5, rtol=0)
    for i in (1, 3, 4):
        data, status = sent[f"uid{i}"]
        assert status == LitAPIStatus.ERROR and data.status_code == 400, (i, data)


def test_one_input_gets_one_answer_from_predict_and_from_serve(servers, tmp_path, capsys):
    running, ckpts, _ = servers
    digit = held_out_digits(1)[0]
    (tmp_path / "d.png").write_bytes(png(digit))
    assert main(["predict", f"ckpt={ckpts['image']}", f"inputs={tmp_path / 'd.png'}", "--probs"]) == 0
    _, label, _, printed = capsys.readouterr().out.strip().split("\t")
    status, answer = request(
        running["image"].port, "POST", "/predict", json.dumps({"image": base64.b64encode(png(digit)).decode()})
    )
    assert status == 200 and answer["class"] == label
    np.testing.assert_allclose(answer["probabilities"], [float(kv.split("=")[1]) for kv in printed.split()], atol=5e-5)
    names, pixels = read_images([str(tmp_path / "d.png")], 32)  # predict's own reading, unrounded
    offline = load_for_inference(ckpts["image"]).probabilities(pixels)[0].numpy()
    np.testing.assert_allclose(answer["probabilities"], offline, atol=1e-5, rtol=0)


def test_info_describes_the_checkpoint_and_the_batching(servers):
    running, ckpts, _ = servers
    status, info = request(running["text"].port, "GET", "/info")
    assert status == 200 and info["checkpoint"] == str(ckpts["text"].resolve()) and info["recipe"] is None
    assert info["model"]["net"] == "lstm" and info["model"]["labels"] == ["neg", "pos"]
    assert info["input"]["field"] == "text" and info["input"]["maxlen"] == 40
    assert info["batching"]["max_batch_size"] == 32 and info["batching"]["batch_timeout"] == 0.005
    assert info["batching"]["workers"] == 1
    from xla_train.serve.server import worker_threads

    assert info["batching"]["threads"] == worker_threads("auto", 1)  # resolved, as the worker runs it


def test_a_worker_leaves_a_core_to_the_http_front(monkeypatch):
    """threads=auto: the cores less one (the HTTP front and LitServe's queues), shared among the workers; at least
    one each. On 2 cores a worker given both spun between batches and starved the front that hands it requests."""
    import os

    from xla_train.serve.server import worker_threads

    for cores, workers, expected in ((2, 1, 1), (1, 1, 1), (16, 1, 15), (16, 2, 7), (8, 16, 1)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert worker_threads("auto", workers) == expected, (cores, workers)
    assert worker_threads(3, 1) == 3


def test_an_idle_server_uses_next_to_no_cpu(servers):
    running, _, _ = servers
    pid = running["text"].proc.pid
    time.sleep(1.5)  # the last test's requests are answered
    before, t0 = tree_cpu_seconds(pid), time.monotonic()
    time.sleep(3)
    share = (tree_cpu_seconds(pid) - before) / (time.monotonic() - t0)
    assert share < 0.05, f"the idle server's processes used {share:.1%} of a core"


def test_sigterm_finishes_the_requests_in_flight_and_frees_the_port(servers):
    """The slow net holds the first request in the worker for 0.5 s, and the rest in the queue, when SIGTERM comes."""
    running, _, _ = servers
    server = running["slow"]
    body = json.dumps({"image": base64.b64encode(png(held_out_digits(1)[0])).decode()})
    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(request, server.port, "POST", "/predict", body) for _ in range(12)]
        time.sleep(0.3)
        assert not any(f.done() for f in futures)  # all in flight
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        results = [f.result(timeout=30) for f in futures]
    code = server.proc.wait(timeout=30)
    took = time.monotonic() - t0
    deadline = time.monotonic() + 5
    while server.group_alive() and time.monotonic() < deadline:  # its workers, manager and HTTP process too
        time.sleep(0.1)
    leftover = server.group_alive()
    server.stop()  # ends any leftover, so that its output can be read
    out, err = server.proc.communicate(timeout=10)
    assert not leftover, "processes of the server outlived it"
    assert [s for s, _ in results] == [200] * 12, results
    assert code == 0 and took < 15, (code, took, err[-2000:])
    assert "finishing requests in flight" in out and "stopped" in out
    with socket.socket() as s:  # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", server.port))


def test_the_serve_extra_pins_litserve_to_its_audited_series():
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    for extra in ("serve", "test"):
        (pin,) = [Requirement(r) for r in extras["optional-dependencies"][extra] if r.startswith("litserve")]
        assert pin.specifier.contains("0.2.19") and not pin.specifier.contains("0.3.0"), (extra, pin)
