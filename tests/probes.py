"""Test-only callbacks that look inside a real CLI run (loaded with --trainer.callbacks+=probes.NAME)."""
import json

import lightning.pytorch as pl
import torch


class AutocastProbe(pl.Callback):
    """Records, during training forwards, whether autocast is on and what dtype the last layer computes in."""

    def __init__(self, out: str):
        self.out, self.seen = out, []

    def on_fit_start(self, trainer, pl_module):
        last = [m for m in pl_module.net.modules() if isinstance(m, torch.nn.Linear)][-1]
        device = trainer.strategy.root_device.type

        def hook(module, inputs, output):
            if module.training:
                self.seen.append({"autocast": torch.is_autocast_enabled(device), "out": str(output.dtype),
                                  "weight": str(module.weight.dtype)})

        last.register_forward_hook(hook)

    def on_fit_end(self, trainer, pl_module):
        with open(self.out, "w") as f:
            json.dump(self.seen, f)
