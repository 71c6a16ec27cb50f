"""Serving a checkpoint on a plain CPU: the unreplicated nn.Module, its preprocessing and its labels.

Imports neither Lightning nor torch_xla. The file is read with weights_only=True
and the net is built from the architecture key it names, so loading a
checkpoint never runs code from it. Predictions do not depend on the batch size.
Images or text: the checkpoint's `kind` says which preprocessing its inputs
get; a text checkpoint carries its own tokenizer and vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from xla_train.checkpoint import net_state_dict, read_inference_block, safe_load
from xla_train.errors import CheckpointError, UserError
from xla_train.models import build_net
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

    def preprocess(self, raw) -> torch.Tensor:
        """uint8 images (N, H, W, 3) of any size, or texts (a str, a list of them, or token ids) -> the net's input."""
        if self.kind == "text":
            return self._preprocess_text(raw)
        size = self.info["image_size"]
        return images_to_tensor(resize_images(np.asarray(raw), size), self.info["mean"], self.info["std"])

    def _preprocess_text(self, raw) -> torch.Tensor:
        """Reviews of any length -> int64 (N, maxlen) ids, cut and padded at the front as in training."""
        maxlen = int(self.info["maxlen"])
        if isinstance(raw, np.ndarray) and np.issubdtype(raw.dtype, np.integer):  # already token ids
            ids = text.fit_to_length([row[row != text.PAD_ID] for row in np.atleast_2d(raw)], maxlen)
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
            ids = text.encode(self.tokenizer, texts, maxlen)
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


def load_for_inference(path) -> Predictor:
    ckpt = safe_load(path)
    block = read_inference_block(ckpt, path)
    try:
        net = build_net(block["arch"], block.get("config", {}))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path} names a net this xla_train cannot build: {e}") from None
    try:
        net.load_state_dict(net_state_dict(ckpt), strict=True)
    except RuntimeError as e:
        raise CheckpointError(
            f"{path}: its weights do not fit the {block['arch']} net it names ({str(e).splitlines()[0]})"
        ) from None
    net.eval()
    predictor = Predictor(model=net, labels=list(block["labels"]), info=block)
    if predictor.kind == "text":
        try:
            predictor.tokenizer = text.tokenizer_from_json(block["tokenizer"])
            int(block["maxlen"])
        except Exception as e:  # missing keys, or a tokenizer JSON that does not parse
            raise CheckpointError(
                f"{path} is a text checkpoint without a usable tokenizer and maxlen "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r})"
            ) from None
    return predictor
