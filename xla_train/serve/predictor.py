"""Serving a checkpoint on a plain CPU: the unreplicated nn.Module, its preprocessing and its labels.

Imports neither Lightning nor torch_xla. The file is read with weights_only=True, a built-in net is built from the
key it names and a user's from the class the user names (models/reference.py), so loading a checkpoint never runs
code from it nor imports on its word. Predictions do not depend on the batch size. The checkpoint's `kind` says
what its inputs get: images are resized and normalised, text is tokenised with the checkpoint's own tokenizer,
arrays go in as they are, checked against the shape and dtype the net trained on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from xla_train import compat
from xla_train.checkpoint import load_net_weights, net_state_dict, read_inference_block, safe_load
from xla_train.errors import CheckpointError, UserError
from xla_train.models.reference import NetRef, build
from xla_train.objective import probabilities
from xla_train.preprocess import text
from xla_train.preprocess.images import images_to_tensor, resize_images


@dataclass
class Predictor:
    model: nn.Module
    labels: list[str]
    info: dict
    tokenizer: object = field(default=None, init=False, repr=False)

    @property
    def kind(self) -> str:
        return self.info.get("kind", "image")

    @property
    def channels(self) -> int:
        """An image checkpoint's colour channels: 3 (RGB), or 1 (grey)."""
        return len(self.info.get("mean", (0, 0, 0)))

    @property
    def net_name(self) -> str:
        """The built-in net's key, or the user's class path."""
        return NetRef.from_block(self.info, "the checkpoint").name

    @property
    def init_args(self) -> dict | None:
        return NetRef.from_block(self.info, "the checkpoint").init_args

    def preprocess(self, raw) -> torch.Tensor:
        """uint8 images (N, H, W, C) of any size, texts (a str, a list of them, or token ids), or arrays of the
        trained shape -> the net's input."""
        if self.kind == "text":
            return self._preprocess_text(raw)
        if self.kind == "array":
            return self._preprocess_array(raw)
        size = self.info["image_size"]
        return images_to_tensor(resize_images(np.asarray(raw), size), self.info["mean"], self.info["std"])

    def _preprocess_array(self, raw) -> torch.Tensor:
        """Samples as the net trained on them: (N, *shape), or one sample of that shape; same dtype kind."""
        shape, dtype = tuple(self.info["shape"]), np.dtype(self.info["dtype"])
        a = np.asarray(raw.numpy() if isinstance(raw, torch.Tensor) else raw)
        if a.shape == shape:
            a = a[None]
        if a.shape[1:] != shape:
            raise UserError(f"inputs of shape {a.shape}; this net takes (N, {', '.join(map(str, shape))}) {dtype}")
        if np.issubdtype(dtype, np.integer) and not np.issubdtype(a.dtype, np.integer):
            raise UserError(f"inputs of dtype {a.dtype}; this net takes integer ids ({dtype})")
        if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise UserError(f"inputs of dtype {a.dtype}; this net takes {dtype} numbers")
        return torch.from_numpy(np.ascontiguousarray(a, dtype=dtype))

    @property
    def sides(self) -> tuple[str, str]:
        """(padding, truncating) of a text checkpoint, as its data module cut and padded each text; at the front
        for a checkpoint that records none (written before either could be set)."""
        return self.info.get("padding", "pre"), self.info.get("truncating", "pre")

    def _preprocess_text(self, raw) -> torch.Tensor:
        """Reviews of any length -> int64 (N, maxlen) ids, cut and padded where training cut and padded them."""
        maxlen = int(self.info["maxlen"])
        if isinstance(raw, np.ndarray) and np.issubdtype(raw.dtype, np.integer):  # already token ids
            ids = text.fit_to_length([row[row != text.PAD_ID] for row in np.atleast_2d(raw)], maxlen, *self.sides)
        else:
            texts = [raw] if isinstance(raw, str) else list(raw)
            for i, t in enumerate(texts):
                if not isinstance(t, str) or not t.strip():
                    raise UserError(
                        f"text {i} is {'empty' if isinstance(t, str) else type(t).__name__}; "
                        f"give each review as a non-empty string"
                    )
            if self.tokenizer is None:  # a Predictor built by hand rather than by load_for_inference
                self.tokenizer = text.tokenizer_from_json(self.info["tokenizer"])
            ids = text.encode(self.tokenizer, texts, maxlen, *self.sides)
        empty = np.flatnonzero(text.token_counts(ids) == 0)
        if len(empty):
            raise UserError(f"text {int(empty[0])} has no words once tokenised; give a review with some text")
        return torch.from_numpy(ids)

    @torch.no_grad()
    def probabilities(self, raw, batch_size: int = 256) -> torch.Tensor:
        x = self.preprocess(raw)
        out = [probabilities(self.model(x[i : i + batch_size])) for i in range(0, len(x), batch_size)]
        return torch.cat(out) if out else torch.empty(0, len(self.labels))

    def predict(self, raw, batch_size: int = 256) -> list[tuple[str, float]]:
        probs = self.probabilities(raw, batch_size)
        top = probs.argmax(dim=1)
        return [(self.labels[int(i)], float(probs[k, i])) for k, i in enumerate(top)]


def load_for_inference(path, net=None, args: dict | None = None) -> Predictor:
    """The checkpoint's net on the CPU in eval mode, with its preprocessing and labels. A user's net needs `net`:
    its class path (the command line), its class, or an instance built as for training, whose weights are then
    loaded in place; `args` are init arguments for a net recorded without them."""
    ckpt = safe_load(path)
    block = read_inference_block(ckpt, path)
    ref = NetRef.from_block(block, path)
    compat.keep_torch_gru()  # torch_xla imported in this process (a notebook that trained): torch's nn.GRU to build
    model = build(ref, path, given=net, args=args)
    what = f"{path}: its weights do not fit the {ref.name} net it names"
    if ref.init_args is None and not isinstance(net, nn.Module) and not args:
        what += f", built from its defaults: the file records no init arguments ({ref.no_args or 'none'}); give them"
        what += " as model.net.init_args.NAME=value"
    load_net_weights(model, net_state_dict(ckpt), what)
    model.cpu().eval()
    predictor = Predictor(model=model, labels=list(block["labels"]), info=block)
    if predictor.kind == "text":
        try:
            predictor.tokenizer = text.tokenizer_from_json(block["tokenizer"])
            int(block["maxlen"])
            text.check_sides(*predictor.sides)
        except Exception as e:  # missing keys, or a tokenizer JSON that does not parse
            raise CheckpointError(
                f"{path} is a text checkpoint without a usable tokenizer, maxlen and padding "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r})"
            ) from None
    return predictor
