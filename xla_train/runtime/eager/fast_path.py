"""The eager CPU and GPU fallback at the hardware's speed: precision, memory format and torch.compile, decided here.

`accelerator=cpu|gpu` is plain PyTorch, whose speed hangs on three knobs users rarely set: bf16 autocast pays
only where the hardware multiplies bf16 natively (elsewhere it is emulated), channels_last lets oneDNN and cuDNN
pick their fastest convolutions, and torch.compile fuses the ops between them but must pay back its first
compile, so compile=auto counts the run's samples against COMPILE_PAYBACK_SAMPLES. `choose` sets each default and
says why (the run report prints it); an explicit key wins. `nn.Module.compile` compiles in place and weights stay
float32, so checkpoints keep their keys (docs/hardware.md, "The CPU and GPU fallback").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import lightning.pytorch as pl
import torch
from torch.nn.utils.rnn import PackedSequence
from typing_extensions import override

from xla_train import compat
from xla_train.runtime.eager.backend import backend_for
from xla_train.runtime.settings import CompileSetting, parse_setting

COMPILE_PAYBACK_SAMPLES = 100_000  # break-even samples, doubled (docs/hardware.md, "The CPU and GPU fallback")


@dataclass
class FastPath:
    """What a cpu/gpu run uses, and why; `compile` stays "auto" until the run's length is known."""

    precision: str
    channels_last: CompileSetting
    compile: CompileSetting
    why: dict[str, str] = field(default_factory=dict)
    float32_lstm: bool = False  # bf16 asked for on a CPU without native bf16: nn.LSTM runs in float32

    def summary(self) -> str:
        cl = {True: "channels_last", False: "contiguous (NCHW)", "auto": "channels_last for conv nets"}
        comp = {True: "compiled (inductor)", False: "eager", "auto": "eager unless compile pays back"}
        parts = [
            (self.precision, "precision"),
            (cl[self.channels_last], "channels_last"),
            (comp[self.compile], "compile"),
        ]
        return "; ".join(f"{what} ({self.why[key]})" for what, key in parts)


def choose(
    kind: str, precision=None, compile: CompileSetting = "auto", channels_last: CompileSetting = "auto"
) -> FastPath:
    """The precision, memory format and compile setting of an eager run on accelerator=`kind`, from what its
    backend answers; an explicit key always wins."""
    backend = backend_for(kind)
    compile, channels_last = parse_setting("compile", compile), parse_setting("channels_last", channels_last)
    why = {}
    native, lacks = backend.native_bf16()
    if precision is not None:
        why["precision"] = "precision= as given"
        precision = str(precision)
    else:
        precision = "bf16-mixed" if native else "32-true"
        why["precision"] = f"default: {native}" if native else f"default: {lacks}, where bf16 would be emulated"
    why["channels_last"] = "default: conv nets only" if channels_last == "auto" else "channels_last= as given"
    why["compile"] = (
        f"default: compiles when the run trains >= {COMPILE_PAYBACK_SAMPLES:,} samples"
        if compile == "auto"
        else "compile= as given"
    )
    if compile == "auto":
        compile, reason = backend.compile_default()
        if reason:
            why["compile"] = f"default: {reason}"
    float32_lstm = backend.runs_on_host and precision.startswith("bf16") and not native
    return FastPath(precision, channels_last, compile, why, float32_lstm)


def is_conv_net(net: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in net.modules())


def _to_channels_last(module, args):
    """Forward pre-hook: a 4-d image batch enters in the memory format of the channels_last weights."""
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
    return None


def _lstm_in_float32(self, input, hx=None):  # noqa: A002 (nn.LSTM's argument name)
    """nn.LSTM's forward with autocast off and its input and state in float32: oneDNN has no bf16 LSTM primitive on
    a CPU without native bf16, so under bf16 autocast the layer would fail there. What follows it still autocasts."""
    with torch.autocast("cpu", enabled=False):
        if isinstance(input, PackedSequence):
            input = PackedSequence(input.data.float(), input.batch_sizes, input.sorted_indices, input.unsorted_indices)
        elif input.is_floating_point():
            input = input.float()
        if hx is not None:
            hx = tuple(h.float() for h in hx)
        return torch.nn.LSTM.forward(self, input, hx)


class FastPathCallback(pl.Callback):
    """Applies a FastPath to the Classifier's net, and reports torch.compile's compile time per epoch as
    XLA's is (the epoch line's `compile ... s`) through `publish(trainer, metrics)`, which training/ supplies:
    runtime/ does not import it."""

    def __init__(self, fast_path: FastPath, publish=None) -> None:
        self.fast_path, self.publish = fast_path, publish
        self.channels_last = self.compiled = False
        self._float32_lstms: dict = {}  # {layer: its own class}, given back at teardown
        self._clock = compat.inductor_compile_clock()
        self._epoch_start = (0, 0.0)

    @override
    def setup(self, trainer, pl_module, stage: str) -> None:
        fp, net = self.fast_path, pl_module.net
        conv = is_conv_net(net)
        self.channels_last = fp.channels_last is True or (fp.channels_last == "auto" and conv)
        if fp.channels_last == "auto":
            fp.why["channels_last"] = "default: a conv net" if conv else "default: not a conv net"
        if self.channels_last:
            compat.channels_last_inputs(net, _to_channels_last)
        if fp.float32_lstm and not self._float32_lstms:
            self._float32_lstms = compat.swap_forward(net, (torch.nn.LSTM,), _lstm_in_float32)
            if self._float32_lstms:
                fp.why["precision"] += "; nn.LSTM in float32, as oneDNN has no bf16 LSTM without native bf16"
        if stage != "fit" or fp.compile != "auto":  # compile=auto on fit is decided in on_fit_start
            self._compile(net, 0)  # given, or nothing trains: compile=auto has nothing to pay back
        fp.channels_last = self.channels_last

    @override
    def on_fit_start(self, trainer, pl_module) -> None:
        """compile=auto counts the run's samples, for which Lightning builds the training loader and starts it: not
        in setup, which runs before a resumed run's data module is restored (that loader would start the epoch's
        order from its first batch, and Lightning keeps it), but here, after."""
        if self.fast_path.compile == "auto":
            self._compile(pl_module.net, self._training_samples(trainer))

    def _compile(self, net, samples: int) -> None:
        fp = self.fast_path
        if fp.compile == "auto":
            pays = samples >= COMPILE_PAYBACK_SAMPLES
            fp.why["compile"] = (
                f"default: {samples:,} training samples {'>=' if pays else '<'} "
                f"{COMPILE_PAYBACK_SAMPLES:,} to pay back its first compile"
            )
            fp.compile = pays
        if fp.compile and not self.compiled:
            net.compile()  # in place: the state dict keeps its keys, no _orig_mod.
            self.compiled = True

    @override
    def teardown(self, trainer, pl_module, stage: str) -> None:
        compat.restore_classes(self._float32_lstms)  # the net goes back as the user's own classes
        self._float32_lstms = {}

    @staticmethod
    def _training_samples(trainer) -> int:
        dm = getattr(trainer, "datamodule", None)
        batch = getattr(dm, "batch_size", None)
        if not batch:
            return 0
        compat.setup_train_data(trainer)
        return int(trainer.estimated_stepping_batches) * batch * trainer.accumulate_grad_batches

    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._epoch_start = self._clock()

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self.compiled or self.publish is None:
            return
        (n0, s0), (n1, s1) = self._epoch_start, self._clock()
        self.publish(trainer, {"inductor_compiles": n1 - n0, "inductor_compile_s": s1 - s0})
