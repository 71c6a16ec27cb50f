"""Serving a checkpoint on a plain CPU: the unreplicated nn.Module, its preprocessing and its labels.

Imports neither Lightning nor torch_xla. The file is read with weights_only=True
and the net is built from the architecture key it names, so loading a
checkpoint never runs code from it. Predictions do not depend on the batch size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from xla_train.checkpoint import net_state_dict, read_inference_block, safe_load
from xla_train.errors import CheckpointError
from xla_train.models import build_net
from xla_train.preprocess import images_to_tensor, resize_images


@dataclass
class Predictor:
    model: nn.Module
    labels: list[str]
    info: dict

    def preprocess(self, raw) -> torch.Tensor:
        """uint8 images (N, H, W, 3) of any size -> the net's input tensor."""
        size = self.info["image_size"]
        return images_to_tensor(resize_images(np.asarray(raw), size), self.info["mean"], self.info["std"])

    @torch.no_grad()
    def probabilities(self, raw, batch_size: int = 256) -> torch.Tensor:
        x = self.preprocess(raw)
        out = [self._probs(self.model(x[i:i + batch_size])) for i in range(0, len(x), batch_size)]
        return torch.cat(out) if out else torch.empty(0, len(self.labels))

    @staticmethod
    def _probs(logits: torch.Tensor) -> torch.Tensor:
        if logits.ndim == 1 or logits.shape[-1] == 1:
            p = torch.sigmoid(logits.reshape(-1, 1))
            return torch.cat([1 - p, p], dim=1)
        return torch.softmax(logits, dim=-1)

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
        raise CheckpointError(f"{path}: its weights do not fit the {block['arch']} net it names "
                              f"({str(e).splitlines()[0]})") from None
    net.eval()
    return Predictor(model=net, labels=list(block["labels"]), info=block)
