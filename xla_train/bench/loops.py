"""What a bench cell runs under the Stopwatch (bench/timing.py): the recipe planned and built as fit does.

`Loop` does that and records what the cell ran with; LightningLoop (Lightning's fit loop, what users run) and
PlainLoop (a hand-written loop on the same runtime: bench overhead's other side) override only its `steps`
(docs/results.md, "How the benchmarks time").
"""

from __future__ import annotations

import tempfile

from xla_train.bench.timing import Stopwatch, traced_once, units
from xla_train.runtime import registry
from xla_train.runtime.grouping import grouping_of
from xla_train.runtime.registry import backend_for


class Loop:
    """Warm-up + timed training steps of a recipe on the planned hardware; a variant overrides `steps`."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def run(self) -> dict:
        from xla_train import compat
        from xla_train.bench.data import use_data
        from xla_train.bench.report import cpu_model
        from xla_train.config.build import build_run
        from xla_train.runtime.plan import plan_hardware

        s = self.spec
        accelerator, processes = s["accelerator"], s.get("processes", 1)
        devices = s.get("devices", 1) if processes == 1 else s["devices"] // processes  # each process's share
        plan = plan_hardware(
            accelerator,
            1 if backend_for(accelerator).runs_on_host else devices,
            "auto",
            s.get("precision"),
            num_nodes=processes,
            steps_per_execution=s.get("steps_per_execution", 1),
            execution_loop=s.get("execution_loop", "auto"),
            compile=s.get("compile", "auto"),
            channels_last=s.get("channels_last", "auto"),
            runtime=s.get("runtime", "auto"),
            scan_chunk=s.get("scan_chunk_set"),
            compile_cache="off",  # a cell times its compile: a cache would hand it the last run's programs
        )
        model, dm, length = build_run(s["recipe"], {**s.get("overrides", {}), "batch_size": str(s["batch"])})
        n = plan.trainer_kwargs.get("devices", 1)
        n = (n if isinstance(n, int) else 1) * processes  # every device of every process
        strategy = plan.trainer_kwargs.get("strategy")
        self.k = self.steps_per_execution(strategy, s, length, n, model)
        self.total = sum(units(s["warmup"], s["steps"], backend_for(accelerator), self.k)) * self.k
        data = use_data(dm, model.net, s.get("data", "synthetic"), self.total * s["batch"] * n)
        dm.place(*plan.resident_data)  # data.on_device: resident or streamed, as fit decides
        inductor = compat.inductor_compile_clock()
        watch = self.steps(plan, model, dm)
        out = watch.result()
        fp = plan.fast_path
        if fp is not None:  # what the cell ran with, its defaults resolved (runtime/eager/fast_path.py)
            out.update(precision=fp.precision, compile=fp.compile, channels_last=fp.channels_last)
            if fp.compile:
                out["compiles"], out["compile_s"] = inductor()
        out.update(
            on_device=dm.resident,
            steps_per_execution_used=self.k,
            execution_loop_used=grouping_of(strategy).loop if self.k > 1 else None,
            traced_once=traced_once(strategy),
            scan_chunk=watch.scan_chunk,
            grouping_note=grouping_of(strategy).note or None,  # what auto chose, and why
            matmul_precision=plan.matmul_precision,
        )  # XLA: the float32 matmul precision in effect
        split = f" ({processes} processes of {n // processes})" if processes > 1 else ""
        out.update(
            device=watch.backend.describe(watch.device, cpu_model()) + (f" x{n}" if n > 1 else "") + split,
            devices=n,
            global_batch=s["batch"] * n,
            data=data,
            samples_per_s=s["batch"] * n / (out["step_ms"] / 1e3),
            device_peak_mb=watch.backend.peak_mb(watch.device),
            runtime=plan.runtime.name if plan.is_xla else None,
        )
        return out

    def steps(self, plan, model, dm) -> Stopwatch:
        raise NotImplementedError

    @staticmethod
    def steps_per_execution(strategy, spec: dict, length: tuple, devices: int, model=None) -> int:
        """K (and the loop) as fit would run this recipe: auto decided against the recipe's own run (its epochs of
        its training set at this global batch, the spec's train_size) and its net, not against the few steps a cell
        times. A spec without train_size sets its K (bench overhead's 1): only the net is left to decide the loop."""
        g = grouping_of(strategy)
        if g.pending or g.loop_pending:
            from xla_train.runtime.plan import run_steps

            if "train_size" not in spec:
                strategy.fit_to_run(strategy.steps_per_execution, None, model)
                return strategy.steps_per_execution
            epoch = max(1, spec["train_size"] // (spec["batch"] * devices))
            strategy.fit_to_run(epoch, run_steps(epoch, *length), model)
        return grouping_of(strategy).k


class LightningLoop(Loop):
    """The product's path: Lightning's fit loop with the planned strategy and the run's XLA callback."""

    def steps(self, plan, model, dm) -> Stopwatch:
        import lightning.pytorch as pl
        from typing_extensions import override

        from xla_train.runtime.registry import backend_of_strategy
        from xla_train.runtime.eager.fast_path import FastPathCallback
        from xla_train.runtime.layers.scan_rnn import scan_chunk
        from xla_train.training.compile_guard import CompileAccounting
        from xla_train.training.progress import KerasProgress

        s, k = self.spec, self.k

        class Clock(pl.Callback):
            @override
            def on_train_start(self, trainer, pl_module):
                self.watch = Stopwatch(
                    s["warmup"],
                    s["steps"],
                    pl_module.device,
                    k,
                    not traced_once(trainer.strategy),
                    backend_of_strategy(trainer.strategy),
                )
                self.watch.scan_chunk = scan_chunk(pl_module)  # the strategy has swapped its scans in by now

            @override
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                self.watch.batch_ready(batch_idx)

            @override
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                self.watch.step_done(batch_idx, outputs["loss"] if isinstance(outputs, dict) else outputs)
                if batch_idx == 0 and k == 1 and self.watch.first_loss is None:  # a program's: from its epoch sums
                    self.watch.first_loss = pl_module.running_metrics("train").get("loss")

        clock = Clock()
        callbacks = [CompileAccounting()] if plan.is_xla else []
        if plan.fast_path is not None:
            callbacks.append(FastPathCallback(plan.fast_path))
        if s.get("progress_every"):  # the live bar as a terminal would get it, drawn into nothing
            callbacks.append(KerasProgress(s["progress_every"], stream=_Terminal()))
        with tempfile.TemporaryDirectory(prefix="xla_train-bench-") as tmp:
            pl.Trainer(
                **plan.trainer_kwargs,
                callbacks=[*callbacks, clock],
                max_epochs=1,
                limit_train_batches=self.total,
                limit_val_batches=0,
                num_sanity_val_steps=0,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                use_distributed_sampler=False,
                default_root_dir=tmp,
            ).fit(model, datamodule=dm)
        return clock.watch


class PlainLoop(Loop):
    """What each runtime's docs teach, on one device, with no Lightning: on torch_xla the device loader, loss,
    backward and step; on JAX one jitted step of loss, gradient and update (runtime/jax/plain_step.py). Each
    with the layer rewrites xla_train swaps in on that runtime, so both sides run the same graph."""

    def steps(self, plan, model, dm) -> Stopwatch:
        from xla_train.objective import cosine_decay, lr_scheduler, make_optimizer

        hp, net = model.hparams, model.net
        opt = make_optimizer(hp, net.parameters())
        total = self.total  # Lightning's estimated_stepping_batches for this run
        sched = lr_scheduler(opt, [cosine_decay(total)] if hp.schedule == "cosine" else [])
        run = self.jax_steps if plan.runtime is registry.RUNTIMES["jax"] else self.torch_xla_steps
        return run(plan, net, opt, sched, dm)

    def torch_xla_steps(self, plan, net, opt, sched, dm) -> Stopwatch:
        import torch

        from xla_train.objective import masked_stats
        from xla_train.runtime.torch_xla.accelerators import keep_cuda_probe_off_the_trace
        from xla_train.runtime.torch_xla.backend import XLA
        from xla_train.runtime.layers import rewrites
        from xla_train.runtime.torch_xla.engine import layer_rewrites
        from xla_train.runtime.torch_xla.strategy import device_loader
        from xla_train.runtime.layers.scan_rnn import scan_chunk

        s = self.spec
        device = plan.trainer_kwargs["strategy"].root_device
        keep_cuda_probe_off_the_trace()  # as xla_train's XLA runs do, and as a process without Lightning is
        rewrites.apply(net, layer_rewrites(), verbose=False)  # as xla_train's torch_xla runs do
        net.to(device).train()
        # the device's generator from the seed, as torch_xla's docs teach and xla_train's strategy does: the same masks
        XLA.set_rng_state(device, torch.initial_seed())
        watch = Stopwatch(s["warmup"], s["steps"], device)
        watch.scan_chunk = scan_chunk(net)
        inputs = dm.batch_inputs()
        for i, batch in enumerate(device_loader(dm.train_dataloader(), device)):
            watch.batch_ready(i)
            x, y = inputs(batch, "train", train=True)
            loss, _ = masked_stats(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            watch.step_done(i, loss)
            if i == watch.total - 1:
                break
        return watch

    def jax_steps(self, plan, net, opt, sched, dm) -> Stopwatch:
        import torch

        from xla_train.objective import masked_stats
        from xla_train.runtime.jax.plain_step import PlainStep
        from xla_train.runtime.jax.strategy import layer_rewrites
        from xla_train.runtime.layers import rewrites
        from xla_train.runtime.layers.scan_rnn import scan_chunk

        s, strategy = self.spec, plan.trainer_kwargs["strategy"]
        engine = strategy.engine
        rewrites.apply(net, layer_rewrites(len(engine.devices), engine.platform), verbose=False)
        net.train()
        step = PlainStep(
            engine, net, opt, dm.batch_inputs(), lambda out, y: masked_stats(out, y)[0], torch.initial_seed()
        )
        watch = Stopwatch(s["warmup"], s["steps"], strategy.root_device, backend=plan.backend)
        watch.scan_chunk = scan_chunk(net)
        try:
            for i, batch in enumerate(dm.train_dataloader()):
                watch.batch_ready(i)
                loss = step(batch, i)
                if sched is not None:
                    sched.step()
                watch.step_done(i, loss)
                if i == watch.total - 1:
                    break
        finally:
            step.close()
        return watch


LOOPS = {"lightning": LightningLoop, "plain": PlainLoop}


class _Terminal:
    """A stream that says it is a terminal, so the live bar draws; what it draws is dropped."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
