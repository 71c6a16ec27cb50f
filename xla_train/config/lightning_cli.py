"""The LightningCLI behind fit/validate/test: recipes in, a versioned run folder out.

Hardware comes from runtime.plan.plan_hardware, so accelerator=tpu|xla|gpu|cpu is
one switch. Each run gets its own version folder (never overwritten) holding
the resolved config, the checkpoints and the metrics log; validate and test
write theirs beside the checkpoint's run (config/run_loggers.py).
"""

from __future__ import annotations

import copy
import logging
import sys
import time

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from torch import nn
from jsonargparse.typing import PositiveInt, restricted_number_type
from lightning.fabric.utilities.exceptions import MisconfigurationException
from typing_extensions import override

from xla_train import compat
from xla_train.checkpoint import read_inference_block, safe_load
from xla_train.config.fit_checkpoint import fit_checkpoint_to
from xla_train.config.recipes import RUN_SETTINGS
from xla_train.config.run_loggers import run_logger
from xla_train.config.run_spec import RunSpec
from xla_train.training.best_checkpoint import BestCheckpoint
from xla_train.training.finite_loss import FiniteLoss
from xla_train.training.run_folder import RunFolder
from xla_train.config.save_config import PicklableSaveConfig
from xla_train.config.startup_lines import StartupLines
from xla_train.data.base import BaseDataModule
from xla_train.errors import ConfigError
from xla_train.models.reference import NetRef, build_with, class_path_of
from xla_train.runtime.eager.fast_path import FastPathCallback
from xla_train.runtime.plan import plan_hardware, run_steps
from xla_train.serve.predictor import load_for_inference
from xla_train.training.compile_guard import CompileAccounting
from xla_train.training.host_memory import HostHeapTrim
from xla_train.training.metrics_log import publish
from xla_train.training.module import Classifier
from xla_train.training.progress import KerasProgress
from xla_train.training.report import RunReport
from xla_train.training.resume import LastCheckpoint, Preemption, RngState
from xla_train.training.run_clock import RunClock


LIGHTNING_CKPT_KEYWORDS = ("last", "best", "hpc", "registry")
SeedInt = restricted_number_type("SeedInt", int, [(">=", 0), ("<=", 2**32 - 1)])


class _DropMisleading(logging.Filter):
    """Lightning's device banner says "TPU cores" for any XLA device, and adverts for its cloud;
    RunReport states the real hardware instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not (msg.startswith("TPU available:") or msg.startswith("\N{ELECTRIC LIGHT BULB} Tip"))


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_DropMisleading())


class XlaTrainCLI(compat.CheckpointReadingCLI, LightningCLI):
    """run=False builds the model, the data module and (unless build_trainer is off) the Trainer, and runs nothing.

    LightningCLI parses the spec's config (config/run_spec.py), the net in it whatever its kind, then the command
    line's native --flags on top. Arrays in memory are not config: Lightning dumps the whole config as hyperparameters
    before it builds a class, and no ndarray dumps, so they go to the ArraysDataModule once it is built, here alone
    (its saved data.path is then null)."""

    def __init__(
        self, spec: RunSpec, run: bool = True, build_trainer: bool = True, startup: StartupLines | None = None
    ):
        self.build_trainer = build_trainer
        self.startup = startup  # Lightning's start-up lines, held until _before_run's checks pass
        self.flags, self.arrays = spec.flags, spec.arrays
        self.started = spec.started if spec.started is not None else time.perf_counter()  # the run's clock
        self.named = spec.command if run else None  # the subcommand that runs (subcommands)
        config = spec.config()
        super().__init__(
            Classifier,
            BaseDataModule,
            subclass_mode_data=True,
            args={"subcommand": self.named, self.named: config} if run and config is not None else config,
            run=run,
            auto_configure_optimizers=False,
            seed_everything_default=0,
            # log_every_n_steps=1: nothing is logged per step (metrics_log.py), so no short epoch is warned about it
            trainer_defaults={"use_distributed_sampler": False, "enable_progress_bar": False, "log_every_n_steps": 1},
            parser_kwargs={"exit_on_error": False, "parser_mode": "yaml"},
            save_config_callback=PicklableSaveConfig,
            save_config_kwargs={"overwrite": False},
        )

    @override
    def subcommands(self) -> dict[str, set[str]]:
        """Only the subcommand that runs gets a parser: Lightning builds one for each of its four from the Trainer's
        and every class's signatures, which is most of a short run's time after its imports."""
        every = LightningCLI.subcommands()
        return {self.named: every[self.named]} if self.named in every else every

    @override
    def add_arguments_to_parser(self, parser) -> None:
        for name, (kind, default, what) in RUN_SETTINGS.items():
            parser.add_argument(f"--{name}", type=kind, default=default, help=what)
        # trainer.limit_*_batches=1 means one batch, and 1.0 all of them: the PEP 604 union keeps int first
        compat.set_type(parser, "trainer.limit_", int | float | None)
        compat.set_type(parser, "seed_everything", bool | SeedInt)  # numpy's seed range, checked as it is parsed
        compat.set_type(parser, "trainer.accumulate_grad_batches", PositiveInt)  # Lightning divides by it

    @override
    def parse_arguments(self, parser, args) -> None:
        """The spec's config, then the native --flags (`--help` and `--print_config` among them) parsed onto it. sys.argv
        is hidden from Lightning's "args and a command line" warning while they parse, and only then, so that
        Lightning's DDP launcher starts each process with the same command."""
        saved, sys.argv = sys.argv, sys.argv[:1]
        try:
            config = parser.parse_object(args) if args is not None else None
            if self.flags or config is None:
                config = parser.parse_args([self.named, *self.flags], namespace=config)
            self.config = config
        finally:
            sys.argv = saved

    def setting(self, key: str):
        """A resolved run setting (runs_dir, xla_guard, ...) of the subcommand that runs."""
        return self._own_config().get(key)

    def _own_config(self):
        return self.config[self.subcommand] if self.subcommand else self.config

    @override
    def instantiate_classes(self) -> None:
        super().instantiate_classes()
        cfg = self._own_config()
        # an instance or a builder: the saved config says model.net: null, and the checkpoint names the net
        named = cfg.model.net
        if isinstance(named, nn.Module):  # an instance, built as it is
            self.model.net_ref, cfg.model.net = NetRef.of(type(self.model.net)), None
        elif named.class_path == class_path_of(build_with):  # a builder, called by jsonargparse once the seed was set
            built = NetRef.of(named.init_args.builder, named.init_args.args, built=self.model.net)
            self.model.net_ref, cfg.model.net = built, None
        else:
            init_args = named.init_args.as_dict() if named.get("init_args") is not None else {}
            self.model.net_ref = NetRef.of(type(self.model.net), init_args)
        if self.arrays is not None:
            if not hasattr(self.datamodule, "hold"):
                raise ConfigError(
                    f"x= and y= are arrays in memory, which recipe=arrays takes; this recipe's data is "
                    f"{type(self.datamodule).__name__}"
                )
            self.datamodule.hold(**self.arrays)

    @override
    def instantiate_trainer(self, **kwargs) -> Trainer | None:
        if not self.build_trainer:
            return None
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        t = init.get("trainer") or {}
        plan = plan_hardware(
            t.get("accelerator", "auto"),
            t.get("devices", "auto"),
            t.get("strategy", "auto"),
            t.get("precision"),
            self.setting("compile_cache"),
            num_nodes=t.get("num_nodes", 1),
            steps_per_execution=self.setting("steps_per_execution") or "auto",
            execution_loop=self.setting("execution_loop") or "auto",
            matmul_precision=self.setting("matmul_precision") or "default",
            compile=self.setting("compile"),
            channels_last=self.setting("channels_last"),
            runtime=self.setting("runtime") or "auto",
            scan_chunk=self.setting("scan_chunk"),
            device_data_mb=self.setting("device_data_mb"),
            process_timeout=self.setting("process_timeout"),
        )
        kwargs.update(plan.trainer_kwargs)
        self.plan = plan
        name = self.setting("recipe_name")
        if t.get("logger") in (None, True):  # fit: a new version_N; validate/test: eval_K beside the checkpoint's run
            kwargs["logger"] = run_logger(
                self.setting("logger_kind"), self.setting("runs_dir"), name, self.subcommand, self.setting("ckpt_path")
            )
        callbacks = list(t.get("callbacks") or [])
        if not any(isinstance(c, ModelCheckpoint) for c in callbacks):
            callbacks.append(BestCheckpoint(self.setting("monitor") or "val_acc", filename=RunFolder.BEST_NAME))
        self.last_checkpoint = LastCheckpoint(self.setting("checkpoint_every"))
        if plan.is_xla:
            callbacks.append(CompileAccounting(self.setting("xla_guard")))
        self.preemption = Preemption()
        # The live bar reads the device mid-epoch on host 0 only; hosts that share one SPMD program must not differ.
        every = self.setting("progress_every") if plan.spmd_hosts == 1 else 0
        if plan.fast_path is not None:
            callbacks.append(FastPathCallback(plan.fast_path, publish))
        self.clock = RunClock(self.started, plan.backend.compile_clock())
        callbacks += [
            self.clock,
            RunReport(plan.kind, plan.fast_path, plan.matmul_precision, plan.compile_cache, plan.runtime_note),
            RngState(),
            FiniteLoss(),
            self.last_checkpoint,
            self.preemption,
            KerasProgress(every),
            HostHeapTrim(),
        ]
        kwargs["callbacks"] = callbacks
        try:
            return super().instantiate_trainer(**kwargs)
        except MisconfigurationException as e:  # Lightning's word for a Trainer setting it refuses
            raise ConfigError(f"trainer: {str(e).strip().splitlines()[0]}") from None

    _ckpt_block: dict | None = None

    @override
    def read_checkpoint_first(self, path: str) -> None:
        if path not in LIGHTNING_CKPT_KEYWORDS:
            self._ckpt_block = read_inference_block(safe_load(path), path)
            self._ckpt_path = path

    def _before_run(self) -> None:
        # These fail here, before any run folder exists: a checkpoint the recipe does not rebuild (validate, test,
        # resume), a net that cannot take the data, a missing or corrupt data set.
        if self._ckpt_block is not None:
            fit_checkpoint_to(
                self._ckpt_block,
                self.model.net_reference(),
                self.model.net,
                self.datamodule,
                self._ckpt_path,
                f"recipe {self.setting('recipe_name')}",
                "; use a checkpoint written by this recipe",
            )
        else:
            self.datamodule.check_net(self.model.net)
        if self.subcommand == "fit" and self.trainer is not None:  # whole global batches only: at least one
            self.datamodule.check_one_batch(self.trainer.num_devices * self.trainer.num_nodes)
        if getattr(self, "plan", None) is not None:  # on the device, or streamed; on_device=true over budget fails
            self.datamodule.place(*self.plan.resident_data)
        self._check_steps_per_execution()  # a group of steps longer than an epoch
        if self.startup is not None:
            self.startup.release()  # the run starts: Lightning's start-up lines, then the run's own

    def _check_steps_per_execution(self) -> None:
        t = self.trainer
        k = getattr(t.strategy, "steps_per_execution", 1) if t is not None else 1
        if k == 1 or self.subcommand != "fit":
            return
        steps = len(self.datamodule.arrays("train")[1]) // (self.datamodule.batch_size * t.num_devices * t.num_nodes)
        limit = t.limit_train_batches
        steps = min(steps, limit) if isinstance(limit, int) else int(steps * limit)
        # auto decided by the run's length, refused here before the run folder, or shrunk to the epoch
        t.strategy.fit_to_run(steps, run_steps(steps, t.max_epochs, t.max_steps), self.model)

    before_fit = before_validate = before_test = _before_run  # LightningCLI calls before_<subcommand>

    def _report(self, stage: str) -> None:
        m = self.model.epoch_metrics
        if self.trainer.is_global_zero:
            print(f"{stage}: " + "  ".join(f"{k} {v:.4f}" for k, v in m.items() if k.startswith(stage)), flush=True)

    def after_validate(self) -> None:
        self._report("val")

    def after_test(self) -> None:
        self._report("test")

    def _test_label(self) -> str:
        if getattr(self.datamodule, "test_is_held_out", True):
            return "held-out test accuracy"
        return "test accuracy (not held out: val_fraction=0 also chose the checkpoint on the test split)"

    def after_fit(self) -> None:
        chooser = self.trainer.checkpoint_callback
        best = chooser.best_model_path or self.last_checkpoint.path
        why = chooser.why() if isinstance(chooser, BestCheckpoint) else None
        if why and self.trainer.is_global_zero:
            print(why, flush=True)
        if self.setting("test_after_fit") and best:
            with compat.without_checkpoint_restore_lines():  # the report above names the checkpoint, the line below too
                self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best, verbose=False)
            acc = self.model.epoch_metrics.get("test_acc")
            if acc is not None and self.trainer.is_global_zero:
                print(f"{self._test_label()}: {acc:.4f} (best checkpoint {best})", flush=True)
        n = self.setting("predict_samples")
        if n and best and self.trainer.is_global_zero:
            # the plain nn.Module, on the CPU: a copy of the net that trained, the best checkpoint's weights loaded
            predictor = load_for_inference(best, net=copy.deepcopy(self.model.net))
            images, labels = self.datamodule.arrays("test")
            print(f"CPU predictions from {best}:")
            for (label, p), truth in zip(predictor.predict(images[:n]), labels[:n]):
                print(f"  true {predictor.labels[int(truth)]}  predicted {label}  p={p:.3f}")
        if self.trainer.is_global_zero:
            print(self.clock.summary(), flush=True)
