"""The optimizer's state made before the first step, as device data, so that the first step compiles nothing extra.

torch makes Adam's moments (`zeros_like(p)`) and SGD's momentum buffer (a clone of the gradient) at the first step.
On XLA that is lazy work inside the first step's graph: the zeros are its constants and the state none of its
inputs, so the first step compiles a program run once, and the second step the one every later step runs (two
training graphs at steps_per_execution=1; docs/results.md, "The first step's program"). On a TPU that is a second
compile of the whole step. Sent from the host beforehand, the state is an input from the first step on.

The values are torch's own: Adam's (and AdamW's) zero moments, its step count 0 on the host; SGD's zero buffer,
which at the first step becomes `0 * momentum + gradient`, the gradient itself as torch's clone is, only where
dampening is 0. An optimizer or setting whose first step differs in more than that is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _step_dtype() -> torch.dtype:
    """The dtype of Adam's step count, as torch 2.9.0's `torch.optim.optimizer._get_scalar_dtype` chooses it."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def first_state(optimizer: torch.optim.Optimizer, group: dict, p: torch.Tensor) -> dict[str, torch.Tensor] | None:
    """The host tensors torch's first step would put in `optimizer.state[p]`, or None where that step would do
    more than make them (or this module does not know the optimizer)."""
    if group.get("differentiable") or group.get("fused") or group.get("capturable"):
        return None
    if type(optimizer) in (torch.optim.Adam, torch.optim.AdamW):
        keys = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group.get("amsgrad") else ())
        return {"step": torch.zeros((), dtype=_step_dtype()), **{k: torch.zeros(p.shape, dtype=p.dtype) for k in keys}}
    if type(optimizer) is torch.optim.SGD and group.get("momentum") and not group.get("dampening"):
        return {"momentum_buffer": torch.zeros(p.shape, dtype=p.dtype)}
    return None


def prime_optimizer_state(optimizer: torch.optim.Optimizer, to_device: Callable[[list], list]) -> int:
    """Give every trainable parameter without state the state its first step would make, sent with `to_device`
    (host tensors in, device data out, in one call), Adam's count on the host as torch keeps it; the tensors sent."""
    made: list[tuple[dict, str, torch.Tensor]] = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not p.requires_grad or optimizer.state.get(p):
                continue  # a frozen parameter gets none; a resumed one keeps its own
            state = first_state(optimizer, group, p)
            if state is None:
                continue
            slot = optimizer.state[p]
            for key, t in state.items():
                if key == "step":
                    slot[key] = t  # where torch keeps Adam's count: on the host
                else:
                    made.append((slot, key, t))
    for (slot, key, _), t in zip(made, to_device([t for _, _, t in made]) if made else []):
        slot[key] = t
    return len(made)
