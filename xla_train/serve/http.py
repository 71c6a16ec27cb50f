"""The HTTP interface over the Predictor: a JSON body in, one answer out, whichever way the input came.

Every request is checked and decoded on its own, with the decoder and tokenizer `predict` uses, so a bad one
gets its own 400 and one line while the good ones batched with it are answered (docs/serving.md, "Serve over
HTTP"). The body gate answers what must never reach a worker: a body over the size limit (413), one that is
not JSON (400) and one that stalls (400). Plain torch and starlette: no Lightning, no torch_xla.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json

import numpy as np
import torch

from xla_train.errors import UserError

FIELDS = {
    "image": "the base64 of a PNG or JPEG file",
    "text": "the review, a non-empty string",
    "array": "one sample as nested lists of numbers, in the shape the net trained on",
}


class Refused(UserError):
    """A request this server will not answer, with its HTTP status."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def field_of(predictor) -> str:
    return {"text": "text", "array": "array"}.get(predictor.kind, "image")


def decode_item(predictor, body) -> torch.Tensor:
    """One request's JSON body -> the net's input for that one sample (a batch of 1), or Refused."""
    field = field_of(predictor)
    if not isinstance(body, dict):
        raise Refused(400, f'the body must be a JSON object, {{"{field}": {FIELDS[field]}}}')
    if field not in body:
        other = next((f for f in FIELDS if f in body), None)
        if other is not None:
            raise Refused(400, f'this checkpoint classifies {field}s: send "{field}" ({FIELDS[field]}), not "{other}"')
        raise Refused(400, f'missing field "{field}": send {{"{field}": {FIELDS[field]}}}')
    if set(body) - {field}:
        raise Refused(400, f"unknown field(s) {', '.join(sorted(map(repr, set(body) - {field})))}; send only {field!r}")
    value = body[field]
    if field == "array":
        return decode_array(predictor, value)
    if not isinstance(value, str):
        raise Refused(400, f'"{field}" must be a string ({FIELDS[field]}), not {type(value).__name__}')
    if field == "text":
        if not value.strip():
            raise Refused(400, '"text" is empty; send the review to classify')
        try:
            return predictor.preprocess([value])
        except UserError as e:  # a text whose every word is markup: nothing left once tokenised
            raise Refused(400, str(e).replace("text 0 ", '"text" ', 1)) from None
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise Refused(400, f'"image" is not valid base64 ({e})') from None
    if not data:
        raise Refused(400, '"image" is empty; send the base64 of a PNG or JPEG file')
    from xla_train.preprocess.images import decode_image

    try:
        pixels = decode_image(io.BytesIO(data), int(predictor.info["image_size"]), '"image"', predictor.channels)
    except UserError as e:
        raise Refused(400, f"{e} (the bytes are base64 of a file, not of raw pixels)") from None
    return predictor.preprocess(np.array(pixels[None]))  # a writable copy for torch


def decode_array(predictor, value) -> torch.Tensor:
    """One sample as nested JSON lists -> the net's input (a batch of 1), checked against the trained shape."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError):
        raise Refused(400, f'"array" must be {FIELDS["array"]}: numbers in lists of equal lengths') from None
    if not np.all(np.isfinite(a)):
        raise Refused(400, '"array" holds a value that is not a finite number')
    shape = tuple(predictor.info["shape"])
    if a.shape != shape:
        raise Refused(400, f'"array" has shape {list(a.shape)}; this net takes one sample of shape {list(shape)}')
    if predictor.info["dtype"] == "int64":
        if not np.all(a == np.round(a)):
            raise Refused(400, '"array" holds fractions; this net takes integer ids')
        a = a.astype(np.int64)
    return predictor.preprocess(a)


def answer(predictor, row: torch.Tensor) -> dict:
    """One row of probabilities -> {"label", "class", "probabilities"}."""
    label = int(row.argmax())
    out = {"label": label, "class": predictor.labels[label]} if predictor.labels else {"label": label}
    return {**out, "probabilities": [float(p) for p in row]}


def describe_input(predictor) -> dict:
    """What /info says the model expects."""
    if predictor.kind == "text":
        padding, truncating = predictor.sides
        return {
            "field": "text",
            "kind": "text",
            "maxlen": int(predictor.info["maxlen"]),
            "padding": padding,
            "truncating": truncating,
            "note": FIELDS["text"],
        }
    if predictor.kind == "array":
        info = predictor.info
        return {
            "field": "array",
            "kind": "array",
            "shape": info["shape"],
            "dtype": info["dtype"],
            "note": FIELDS["array"],
        }
    size = int(predictor.info["image_size"])
    return {
        "field": "image",
        "kind": "image",
        "note": FIELDS["image"]
        + f"; any size, resized to {size}x{size} {'RGB' if predictor.channels == 3 else 'grey'}",
        "image_size": size,
        "mean": list(predictor.info["mean"]),
        "std": list(predictor.info["std"]),
    }


class BodyGate:
    """ASGI middleware for POST bodies: 413 past max_bytes, 400 when it is not JSON or stalls for timeout seconds.

    The bytes are counted as they arrive, so the limit holds however the body is framed: a Content-Length over it is
    refused before any is read, and a chunked body, or one longer than its Content-Length, is cut off at it (uvicorn
    itself answers framing it cannot parse with a 400 and closes). A body that stops short of its Content-Length,
    or a chunked one with no last chunk, would hold its connection forever: uvicorn has no body timeout.
    """

    def __init__(self, app, max_bytes: int, timeout: float, path: str = "/predict"):
        self.app, self.max_bytes, self.timeout, self.path = app, max_bytes, timeout, path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        too_big = f"the body is over the limit of {self.max_bytes:,} bytes (max_body_mb); send a smaller image"
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            return await refuse(send, 413, too_big)
        body, more = b"", True
        while more:
            try:
                message = await asyncio.wait_for(receive(), self.timeout)
            except asyncio.TimeoutError:
                declared = f" of the {int(length):,} its Content-Length declares" if length.isdigit() else ""
                stalled = f"the body stopped at {len(body):,} bytes{declared}: nothing more came for {self.timeout:g} s"
                return await refuse(send, 400, stalled + " (body_timeout)", close=True)  # the rest may yet come
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await refuse(send, 413, too_big)
        try:
            json.loads(body)
        except ValueError as e:  # UnicodeDecodeError is one
            return await refuse(send, 400, f"the body is not JSON ({str(e).splitlines()[0]})")
        # JSON whatever the client called it (curl -d says form-urlencoded), so LitServe reads it as JSON
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def refuse(send, status: int, detail: str, close: bool = False) -> None:
    payload = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [(b"connection", b"close")] if close else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
