"""What a net's outputs mean and how it learns: the one definition that training, serving and the benchmarks share.

One output is a binary classifier (BCE on a logit, P(positive) by sigmoid); more mean softmax cross-entropy. Rows
labelled below zero are padding and count nowhere. The learning rate is the recipe's times factors of the step
alone: a linear warm-up when scaled with the global batch (Goyal et al., 2017), and a cosine decay. Training, CPU
inference and the benchmarks' loop all call these functions, so they do the same work by construction.
Only torch: serving imports this.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F


def is_binary(logits: torch.Tensor) -> bool:
    return logits.ndim == 1 or logits.shape[-1] == 1


def masked_stats(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean loss over real rows, tensor[loss_sum, correct, count]); rows with y < 0 are padding."""
    mask = (y >= 0).to(logits.dtype)
    target = y.clamp(min=0)
    if is_binary(logits):
        logits = logits.reshape(-1)
        losses = F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype), reduction="none")
        pred = (logits > 0).long()
    else:
        losses = F.cross_entropy(logits, target, reduction="none")
        pred = logits.argmax(-1)
    count = mask.sum()
    loss_sum = (losses * mask).sum()
    correct = ((pred == target).to(logits.dtype) * mask).sum()
    return loss_sum / count.clamp(min=1), torch.stack([loss_sum, correct, count]).float()


def probabilities(logits: torch.Tensor) -> torch.Tensor:
    """(N, classes) probabilities; a binary net's one logit becomes [P(0), P(1)]."""
    if is_binary(logits):
        p = torch.sigmoid(logits.reshape(-1, 1))
        return torch.cat([1 - p, p], dim=1)
    return torch.softmax(logits, dim=-1)


def make_optimizer(hp, params, lr: float | None = None) -> torch.optim.Optimizer:
    """The optimizer a Classifier's hyperparameters describe (lr: the rate after any scaling).

    foreach=True: torch picks the multi-tensor update by itself only for CUDA
    tensors, and otherwise updates one parameter at a time, each op checked in
    Python. The multi-tensor form is the same arithmetic in fewer, wider calls:
    on XLA it is the host's trace of every step that shrinks, on the CPU the
    update itself (docs/feeding.md). The state it keeps is the same.
    """
    lr = hp.lr if lr is None else lr
    if hp.optimizer == "sgd":
        return torch.optim.SGD(
            params,
            lr=lr,
            momentum=hp.momentum,
            weight_decay=hp.weight_decay,
            nesterov=hp.nesterov and hp.momentum > 0,
            foreach=True,
        )
    return torch.optim.Adam(params, lr=lr, weight_decay=hp.weight_decay, foreach=True)


def linear_warmup(k: int, warmup_steps: int) -> Callable[[int], float]:
    """The factor on k x lr that starts at lr and reaches k x lr after warmup_steps."""
    return lambda s: (1 + (k - 1) * min(s, warmup_steps) / warmup_steps) / k


def cosine_decay(total_steps: int) -> Callable[[int], float]:
    return lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))


def lr_scheduler(opt: torch.optim.Optimizer, factors: list[Callable[[int], float]]):
    """A per-step LambdaLR that multiplies the factors, or None when there are none."""
    if not factors:
        return None
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: math.prod(f(s) for f in factors))
