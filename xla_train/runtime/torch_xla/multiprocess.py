"""strategy=xla_mp: Lightning's XLAStrategy, one process per TPU core, for TPU users who want it.

SPMD (spmd.py) is the default and torch_xla's recommended path; this one is refused off a TPU (plan.py), since
XLA:CPU cannot run its collectives (pytorch/xla#5005). Training runs in worker processes, and Lightning's
launcher brings back to the parent only the weights and callback_metrics, so what xla_train reads after a run
(the module's epoch_metrics, the run folder's version and metrics log, the last and preemption checkpoints'
paths) is brought back too.
"""

from __future__ import annotations

from lightning.pytorch.strategies import XLAStrategy
from typing_extensions import override

from xla_train import compat
from xla_train.runtime.checkpoint_io import AtomicCheckpointIO
from xla_train.runtime.torch_xla import compat as xla_compat
from xla_train.runtime.torch_xla.engine import OneDevice, TorchXlaEngine
from xla_train.runtime.torch_xla.strategy import device_loader


class XLAMultiProcessStrategy(compat.OwnCheckpointIO, compat.ReturningXLALauncher, XLAStrategy):
    """Lightning's XLAStrategy with the atomic checkpoint writer, the device loader that shows Lightning the
    sampler to reshuffle, and the engine's model placement (the scan RNNs); one step at a time."""

    strategy_name = "xla_mp"
    engine: TorchXlaEngine | None = None  # made in each worker, on its own device

    @override
    def model_to_device(self) -> None:
        self.engine = TorchXlaEngine(OneDevice(self.root_device))
        self.engine.place_model(self.model, super().model_to_device)

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        self.engine.prime_optimizers(self.optimizers)

    @override
    def teardown(self) -> None:
        super().teardown()  # moves the model back to the CPU
        if self.engine is not None:
            self.engine.restore_model(self.model)

    def worker_results(self, trainer) -> dict:
        return worker_results(trainer)

    def restore_worker_results(self, trainer, results: dict) -> None:
        restore_worker_results(trainer, results)

    def default_checkpoint_io(self) -> AtomicCheckpointIO:
        return AtomicCheckpointIO("xla", xla_compat.xla_to_cpu)

    @override
    def process_dataloader(self, dataloader):
        return device_loader(dataloader, self.root_device)  # so that Lightning can reshuffle each epoch


# Attributes of callbacks that hold what a run left behind: the last and preemption checkpoints' paths
# (training/resume.py), and whether the config was saved (Lightning's SaveConfigCallback, which a later
# test would otherwise find in the way).
CALLBACK_RESULTS = ("path", "saved_to", "already_saved")


def worker_results(trainer) -> dict:
    """In worker 0: what the parent's module, logger and callbacks need to say what this run did."""
    module = trainer.lightning_module
    return {
        "epoch_metrics": dict(getattr(module, "epoch_metrics", {})),
        "logger": compat.logger_state(trainer.logger) if trainer.logger is not None else None,
        "callbacks": {
            i: {a: getattr(c, a) for a in CALLBACK_RESULTS if hasattr(c, a)} for i, c in enumerate(trainer.callbacks)
        },
    }


def restore_worker_results(trainer, results: dict) -> None:
    """In the parent, on the same Trainer (its callbacks in the same order as the worker's copy)."""
    module = trainer.lightning_module
    if hasattr(module, "epoch_metrics"):
        module.epoch_metrics.update(results["epoch_metrics"])
    if trainer.logger is not None and results["logger"] is not None:
        compat.set_logger_state(trainer.logger, results["logger"])
    for i, c in enumerate(trainer.callbacks):
        for a, v in results["callbacks"].get(i, {}).items():
            setattr(c, a, v)
