"""The model worker LitServe spawns: its LitAPI and the batching loop it runs.

The loop is LitServe's public extension point (a LitLoop); it replaces LitServe's batched loop for three reasons.
That loop decodes a batch's requests together, so one bad request fails them all; this one decodes each apart
and answers a bad one alone. That loop polls its queue every millisecond while idle; this one blocks on it. And
that loop waits out batch_timeout for every batch, a lone client's too; this one waits only for requests that are
likely coming (docs/serving.md, "How requests are batched"). Both classes live at module level because spawn
pickles the LitAPI by name. Imports LitServe; no Lightning.
"""

from __future__ import annotations

import signal
import sys
import time
from queue import Empty

import litserve as ls
import torch
from litserve.loops import LitLoop
from litserve.utils import LitAPIStatus, LoopResponseType, PickleableHTTPException

from xla_train.objective import probabilities
from xla_train.serve.http import Refused, answer, decode_item
from xla_train.serve.predictor import load_for_inference

REGULAR = LoopResponseType.REGULAR


class PerItemLoop(LitLoop):
    def __init__(self):
        super().__init__()
        # the last batch: its size, and how long its requests took to arrive (first to last queued)
        self.last, self.spread = 1, 0.0

    def run(self, lit_api, device, worker_id, request_queue, transport, workers_setup_status, callback_runner):
        items = self.collect(lit_api, request_queue)
        ok, batch = [], []
        for rq, uid, queued_at, body in items:
            try:
                waited = time.monotonic() - queued_at
                if lit_api.request_timeout not in (None, False, -1) and waited > lit_api.request_timeout:
                    raise Refused(504, f"the request waited {waited:.1f} s in the queue; the server is overloaded")
                batch.append(decode_item(lit_api.predictor, body))
                ok.append((rq, uid))
            except Exception as e:  # Refused: the request's fault (4xx); anything else a bug (500), for it alone
                status, detail = (e.status, e.detail) if isinstance(e, Refused) else (500, type(e).__name__)
                self.put_response(
                    transport, rq, uid, PickleableHTTPException(status, detail), LitAPIStatus.ERROR, REGULAR
                )
        if items:
            lit_api.count_batch(len(items))
        if not ok:
            return
        try:
            rows = lit_api.predict(torch.cat(batch))
            out = [(lit_api.encode_response(row), LitAPIStatus.OK) for row in rows]
        except Exception as e:  # a bug, not a request's fault: every request of the batch gets a 500
            failed = PickleableHTTPException(500, f"prediction failed: {type(e).__name__}")
            out = [(failed, LitAPIStatus.ERROR)] * len(ok)
        for (rq, uid), (data, status) in zip(ok, out):
            self.put_response(transport, rq, uid, data, status, REGULAR)

    def collect(self, lit_api, request_queue) -> list:
        """Block for the first request (one wake a second when idle) and take it at once with what queued while the
        worker was busy. Wait for more only while they are likely on their way: clients answered in the last batch
        send again, so until the batch is as large as the last one, for at most twice the time the last one took to
        arrive, and never past batch_timeout after the first was queued. A lone client is answered without a wait;
        closed-loop clients keep arriving in batches as large as before; the end of a burst costs a short wait."""
        items = []
        try:
            items.append(request_queue.get(timeout=1.0))
            if stop(items[0]):
                sys.exit(0)
            want = min(lit_api.max_batch_size, self.last)
            deadline = items[0][2] + min(lit_api.batch_timeout, 2 * self.spread)
            while len(items) < lit_api.max_batch_size:
                left = deadline - time.monotonic()
                items.append(
                    request_queue.get(timeout=left) if len(items) < want and left > 0 else request_queue.get_nowait()
                )
        except Empty:
            pass
        if any(stop(i) for i in items):
            sys.exit(0)
        if items:
            self.last, self.spread = len(items), items[-1][2] - items[0][2]
        return items


def stop(item) -> bool:
    """LitServe's stop request (None, or a tuple without a uid), not a request of a client."""
    return not isinstance(item, tuple) or len(item) != 4 or item[1] is None


class PredictorAPI(ls.LitAPI):
    """The checkpoint's Predictor, loaded once per worker; `counts[n]` counts the batches of n requests formed."""

    def __init__(self, ckpt: str, counts, threads: int, net=None, net_args: dict | None = None, **batching):
        super().__init__(loop=PerItemLoop(), **batching)
        self.ckpt, self.counts, self.threads, self.predictor = ckpt, counts, threads, None
        self.net, self.net_args = net, net_args  # what the user named for a checkpoint of their own net

    def setup(self, device):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the group; the parent drains, then ends us
        torch.set_num_threads(self.threads)  # server.worker_threads: what is left beside the HTTP front
        self.predictor = load_for_inference(self.ckpt, net=self.net, args=self.net_args)

    def count_batch(self, n: int) -> None:
        with self.counts.get_lock():
            self.counts[min(n, len(self.counts) - 1)] += 1

    @torch.no_grad()
    def predict(self, x):
        return probabilities(self.predictor.model(x))

    def encode_response(self, output):
        return answer(self.predictor, output)
