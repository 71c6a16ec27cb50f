"""Adam and SGD as pure functions of the optimizer's own state, for a training step traced once as a program.

A program traced once cannot call torch.optim's step, which updates tensors in place and keeps Adam's step count
on the host, so the update is written here as torch.optim computes it (runtime/torch_xla/engine.py runs it),
and a checkpoint holds torch.optim's own state whatever ran it.
"""

from __future__ import annotations

import torch

from xla_train import compat
from xla_train.errors import ConfigError


class FunctionalOptimizer:
    """torch.optim.Adam or SGD as a pure function of (params, grads, state, per-step scalars), computed as torch 2.9 to
    2.12 compute them (their foreach forms compute the same); tests/test_functional_optimizer.py holds it to
    torch.optim."""

    # What update() computes, per optimizer: the options it reads, and the settings it cannot compute.
    REFUSED = {
        torch.optim.Adam: {"amsgrad": False, "maximize": False, "decoupled_weight_decay": False},
        torch.optim.SGD: {"dampening": 0, "maximize": False},
    }

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        name = type(optimizer).__name__
        accepted = (
            "steps_per_execution>1 runs Adam (without amsgrad, maximize or decoupled_weight_decay) or SGD "
            "(without dampening or maximize), with one parameter group, inside the XLA program"
        )
        if type(optimizer) not in self.REFUSED:
            raise ConfigError(f"{accepted}; this run's optimizer is {name}")
        if len(optimizer.param_groups) != 1:
            raise ConfigError(f"{accepted}; this run's {name} has {len(optimizer.param_groups)} parameter groups")
        g = optimizer.param_groups[0]
        off = [f"{k}={g.get(k)}" for k, plain in self.REFUSED[type(optimizer)].items() if g.get(k, plain) != plain]
        if off:
            raise ConfigError(f"{accepted}; this run's {name} has {', '.join(off)}")
        self.optimizer, self.group = optimizer, g
        if type(optimizer) is torch.optim.Adam:
            self.kind, self.keys = "adam", ("exp_avg", "exp_avg_sq")
        else:
            self.kind, self.keys = "sgd", ("momentum_buffer",) if g["momentum"] else ()
        first = optimizer.state.get(g["params"][0], {})
        self.steps_done = int(first["step"]) if "step" in first else 0  # torch keeps Adam's count on the CPU

    def state(self) -> list[torch.Tensor]:
        """Its state tensors, param by param; zeros (sent from the host: no graph) before the first step."""
        out = []
        for p in self.group["params"]:
            s = self.optimizer.state[p]
            out += [s[k] if k in s else torch.zeros(p.shape, dtype=p.dtype).to(p.device) for k in self.keys]
        return out

    def scalars(self, t: int) -> list[float]:
        """What step t (1-based) needs from the host, computed there in float64 as torch does."""
        g = self.group
        if self.kind == "sgd":
            return [-g["lr"]]
        b1, b2 = g["betas"]
        return [-g["lr"] / (1 - b1**t), (1 - b2**t) ** 0.5]

    def update(self, params, grads, state, scalars) -> tuple[list, list]:
        g, n = self.group, len(self.keys)
        new_params, new_state = [], []
        for i, (p, grad) in enumerate(zip(params, grads)):
            if g["weight_decay"]:
                grad = grad.add(p, alpha=g["weight_decay"])
            s = state[i * n : (i + 1) * n]
            if self.kind == "adam":
                (b1, b2), (m, v) = g["betas"], s
                m = m.lerp(grad, 1 - b1)
                v = v.mul(b2).addcmul(grad, grad, value=1 - b2)
                denom = (v.sqrt() / scalars[1]).add(g["eps"])
                new_params.append(p.detach() + (m / denom) * scalars[0])  # torch: p.addcdiv_(m, denom, -step_size)
                new_state += [m, v]
                continue
            if n:
                buf = s[0].mul(g["momentum"]).add(grad)  # from zeros: torch's first-step clone of the gradient
                grad = grad.add(buf, alpha=g["momentum"]) if g["nesterov"] else buf
                new_state.append(buf)
            new_params.append(p.detach() + grad * scalars[0])
        return new_params, new_state

    def store(self, new_state: list[torch.Tensor], steps: int) -> None:
        self.steps_done += steps
        n = len(self.keys)
        for i, p in enumerate(self.group["params"]):
            s = self.optimizer.state[p]
            s.update(zip(self.keys, new_state[i * n : (i + 1) * n]))
            if self.kind == "adam":
                s["step"] = torch.tensor(float(self.steps_done))
        compat.mark_optimizer_stepped(self.optimizer)
