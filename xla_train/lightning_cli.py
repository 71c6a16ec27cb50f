"""The LightningCLI behind fit/validate/test: recipes in, a versioned run folder out.

Hardware comes from runtime.plan_hardware, so accelerator=tpu|xla|gpu|cpu is
one switch. Each run gets its own version folder (never overwritten) holding
the resolved config, the checkpoints and the metrics log.
"""
from __future__ import annotations

import logging
from typing import Literal, Optional

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from xla_train.callbacks import RunReport
from xla_train.checkpoint import read_inference_block, safe_load
from xla_train.data.base import ArrayDataModule
from xla_train.errors import CheckpointError
from xla_train.progress import KerasProgress
from xla_train.resume import LastCheckpoint, Preemption, RngState
from xla_train.runtime import plan_hardware
from xla_train.runtime.compile_guard import CompileAccounting
from xla_train.tasks import Classifier


LIGHTNING_CKPT_KEYWORDS = ("last", "best", "hpc", "registry")


class _DropMisleading(logging.Filter):
    """Lightning's device banner says "TPU cores" for any XLA device, and adverts for its cloud;
    RunReport states the real hardware instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not (msg.startswith("TPU available:") or msg.startswith("\N{ELECTRIC LIGHT BULB} Tip"))


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_DropMisleading())


def _limits_int_first(parser) -> None:
    """trainer.limit_*_batches=1 means one batch, and 1.0 all of them. The Trainer annotates these
    Optional[Union[int, float]], but typing caches unions up to argument order, so jsonargparse can be
    handed Union[float, int, None], try float first and read 1 as 1.0. The PEP 604 union keeps int first."""
    for action in parser._actions:
        if action.dest.startswith("trainer.limit_") and hasattr(action, "_typehint"):
            action._typehint = int | float | None


class XlaTrainCLI(LightningCLI):
    def __init__(self, args: list[str]):
        super().__init__(
            Classifier, ArrayDataModule, subclass_mode_data=True, args=args,
            auto_configure_optimizers=False, seed_everything_default=0,
            trainer_defaults={"use_distributed_sampler": False, "enable_progress_bar": False},
            parser_kwargs={"exit_on_error": False, "parser_mode": "yaml"},
            save_config_kwargs={"overwrite": False},
        )

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--recipe_name", type=str, default="run", help="names the run folder")
        parser.add_argument("--runs_dir", type=str, default="runs", help="where run folders go")
        parser.add_argument("--logger_kind", type=Literal["csv", "tensorboard"], default="csv")
        parser.add_argument("--test_after_fit", type=bool, default=False,
                            help="after fit, test the best checkpoint on the held-out split")
        parser.add_argument("--predict_samples", type=int, default=0,
                            help="after fit, predict this many held-out inputs on the CPU from the checkpoint")
        parser.add_argument("--xla_guard", type=Literal["warn", "strict", "off"], default="warn",
                            help="after warm-up, a new XLA compilation warns, stops the run, or is ignored")
        parser.add_argument("--progress_every", type=int, default=50,
                            help="on a terminal, refresh the live bar every N steps (each refresh is a host sync)")
        parser.add_argument("--compile_cache", type=Optional[str], default=None,
                            help="a folder for XLA's persistent compile cache (TPU; no effect on XLA:CPU)")
        parser.add_argument("--checkpoint_every", type=int, default=0,
                            help="also write last.ckpt every N training steps (0: at epoch ends only)")
        _limits_int_first(parser)

    def _cfg(self, key: str):
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        return cfg.get(key)

    def instantiate_trainer(self, **kwargs) -> Trainer:
        t = self._get(self.config_init, "trainer", default={})
        plan = plan_hardware(t.get("accelerator", "auto"), t.get("devices", "auto"),
                             t.get("strategy", "auto"), t.get("precision"), self._cfg("compile_cache"),
                             num_nodes=t.get("num_nodes", 1))
        kwargs.update(plan.trainer_kwargs)
        name = self._cfg("recipe_name")
        if t.get("logger") in (None, True):
            if self._cfg("logger_kind") == "tensorboard":
                kwargs["logger"] = TensorBoardLogger(self._cfg("runs_dir"), name=name)
            else:
                kwargs["logger"] = CSVLogger(self._cfg("runs_dir"), name=name)
        callbacks = list(t.get("callbacks") or [])
        if not any(isinstance(c, ModelCheckpoint) for c in callbacks):
            callbacks.append(ModelCheckpoint(monitor="val_acc", mode="max", filename="best-{epoch}"))
        self.last_checkpoint = LastCheckpoint(self._cfg("checkpoint_every"))
        for c in plan.callbacks:
            if isinstance(c, CompileAccounting):
                c.mode = self._cfg("xla_guard")
        self.preemption = Preemption()
        # The live bar reads the device mid-epoch on host 0 only; hosts that share one SPMD program must not differ.
        every = self._cfg("progress_every") if plan.spmd_hosts == 1 else 0
        callbacks += plan.callbacks + [RunReport(plan.kind), RngState(), self.last_checkpoint, self.preemption,
                                       KerasProgress(every)]
        kwargs["callbacks"] = callbacks
        return super().instantiate_trainer(**kwargs)

    def _parse_ckpt_path(self) -> None:
        # Lightning reads the file's hyperparameters here; read it safely first, so that a truncated,
        # foreign or malicious file is a one-line error rather than a traceback.
        self._ckpt_block = None
        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        if path and path not in LIGHTNING_CKPT_KEYWORDS:
            self._ckpt_block = read_inference_block(safe_load(path), path)
            self._ckpt_path = path
        super()._parse_ckpt_path()

    def _check_ckpt_matches_recipe(self) -> None:
        block, net = self._ckpt_block, self.model.net
        if block is None:
            return
        theirs, ours = (block["arch"], block.get("config")), (net.arch, net.config)
        if theirs != ours:
            raise CheckpointError(f"{self._ckpt_path} holds a {theirs[0]} net {theirs[1]}, but recipe "
                                  f"{self._cfg('recipe_name')} builds a {ours[0]} net {ours[1]}; "
                                  f"use a checkpoint written by this recipe")

    def _run_subcommand(self, subcommand: str) -> None:
        self._check_ckpt_matches_recipe()
        self.datamodule.check_net(self.model.net)  # these fail here, before any run folder exists:
        self.datamodule.setup()  # a net that cannot take the data, a missing or corrupt data set
        super()._run_subcommand(subcommand)

    def _report(self, stage: str) -> None:
        m = self.model.epoch_metrics
        if self.trainer.is_global_zero:
            print(f"{stage}: " + "  ".join(f"{k} {v:.4f}" for k, v in m.items() if k.startswith(stage)), flush=True)

    def after_validate(self) -> None:
        self._report("val")

    def after_test(self) -> None:
        self._report("test")

    def after_fit(self) -> None:
        best = self.trainer.checkpoint_callback.best_model_path or self.last_checkpoint.path
        if self._cfg("test_after_fit") and best:
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best, verbose=False)
            acc = self.model.epoch_metrics.get("test_acc")
            if acc is not None and self.trainer.is_global_zero:
                print(f"held-out test accuracy: {acc:.4f} (best checkpoint {best})", flush=True)
        n = self._cfg("predict_samples")
        if n and best and self.trainer.is_global_zero:
            from xla_train.inference import load_for_inference

            predictor = load_for_inference(best)  # the plain nn.Module, on the CPU
            images, labels = self.datamodule.arrays("test")
            print(f"CPU predictions from {best}:")
            for (label, p), truth in zip(predictor.predict(images[:n]), labels[:n]):
                print(f"  true {predictor.labels[int(truth)]}  predicted {label}  p={p:.3f}")
