"""How a run on an XLA runtime groups its training steps: K steps as one program, unrolled or as a While loop.

Both XLA runtimes decide alike, so the rule is written once here: what steps_per_execution=auto chooses for a loop
and a run's length, and what execution_loop=auto chooses for a net on XLA:CPU (docs/feeding.md, "Keep a TPU fed").
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from xla_train.errors import ConfigError

EXECUTION_LOOPS = ("auto", "unroll", "while")
# steps_per_execution=auto. Where the K steps run as a While loop, WHILE_K: an estimate for a TPU (docs/feeding.md),
# which still leaves an epoch of CIFAR-10 at a v5e-8's global batch of 1,024 at least one full group. Where they
# run unrolled (XLA:CPU), measured there against one step a program traced once: K=8 compiles longer and holds
# more memory for steps only a little shorter, so it repays itself only over a long run. So UNROLLED_K from
# UNROLL_LONG_STEPS training steps, else one step a program (the figures: docs/results.md, "What
# steps_per_execution=auto chooses").
WHILE_K = 32
UNROLLED_K = 8
UNROLL_LONG_STEPS = 1000


def execution_loop(setting: str, host_platform: bool) -> str:
    """What execution_loop= means on a platform: auto is a While loop, whose program does not grow with K, except on
    XLA:CPU (`host_platform`), which runs a conv net's step inside a While body many times slower than unrolled
    (docs/feeding.md): there the net decides (loop_for_net), and the plan's K calls unroll until it does."""
    if setting not in EXECUTION_LOOPS:
        raise ConfigError(f"execution_loop={setting!r}; use one of {', '.join(EXECUTION_LOOPS)}")
    if setting != "auto":
        return setting
    return "unroll" if host_platform else "while"


def auto_steps(loop: str, run_steps: float | None = None) -> tuple[int, str, bool]:
    """A While program's compile time and host memory do not grow with K, so K is chosen for the device alone.
    An unrolled program's grow with K, so K=UNROLLED_K only where the run is long enough to pay back its longer
    compile and first execution (UNROLL_LONG_STEPS); a shorter run takes one step a program, still traced once,
    so that Lightning's loop traces no step again (docs/results.md, "What steps_per_execution=auto chooses").
    Before the run's length is known, UNROLLED_K."""
    if loop == "while":
        return WHILE_K, f"{WHILE_K} (auto)", False
    if run_steps is None:
        return UNROLLED_K, f"{UNROLLED_K} (auto)", True
    steps = "an unbounded number of" if run_steps == float("inf") else f"{int(run_steps):,}"
    if run_steps >= UNROLL_LONG_STEPS:
        why = f"{steps} training steps >= {UNROLL_LONG_STEPS:,}, enough to pay back the longer compile"
        return UNROLLED_K, f"{UNROLLED_K} (auto: {why})", False
    why = (
        f"{steps} training steps < {UNROLL_LONG_STEPS:,}, too few to pay back the longer compile of "
        f"{UNROLLED_K} unrolled steps; one step a program, traced once"
    )
    return 1, f"1 (auto: {why})", False


CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def convolution_in(module: nn.Module) -> str | None:
    """The class name of the first convolution module in the net, or None."""
    return next((type(m).__name__ for m in module.modules() if isinstance(m, CONVOLUTIONS)), None)


def loop_for_net(module: nn.Module) -> tuple[str, str]:
    """(loop, why) for execution_loop=auto on XLA:CPU. XLA:CPU runs a convolution's step inside a While body many
    times slower than unrolled, so a net with a convolution unrolls its K steps; any other net runs them as a While
    loop, which there compiled several times faster and ran its steps no slower (the IMDB LSTM and an MLP, on both
    runtimes: docs/results.md, "The While loop against unrolled"). A convolution called as a function, not as a
    module, is not seen: execution_loop=unroll is then the setting to give."""
    conv = convolution_in(module)
    if conv:
        return "unroll", f"auto: the net has an nn.{conv}, which XLA:CPU runs far slower inside a While loop"
    return "while", "auto: no convolution in the net, which XLA:CPU compiles and runs faster as a loop"


@dataclass(frozen=True)
class GroupingSettings:
    """What the user set: steps_per_execution (a number or auto) and execution_loop (auto, unroll or while)."""

    steps_per_execution: int | str = "auto"
    execution_loop: str = "auto"


@dataclass(frozen=True)
class Grouping:
    """How a run groups its training steps, as decide() chooses them: what the strategy runs, the report prints and
    the benchmarks record."""

    k: int = 1  # steps per execution
    loop: str = "unroll"  # or "while": how a program runs its K steps
    note: str = ""  # what auto chose for K, and why; empty where K was set by hand
    loop_note: str = ""  # what auto chose for the loop, and why
    pending: bool = False  # auto, and the run's length still decides K
    loop_pending: bool = False  # execution_loop=auto on XLA:CPU, and the net still decides the loop
    auto: bool = False  # steps_per_execution=auto


def decide(
    settings: GroupingSettings,
    host_platform: bool,
    net: nn.Module | None = None,
    run_steps: float | None = None,
    epoch_steps: int | None = None,
) -> Grouping:
    """K and the loop of a run on an XLA runtime: from the settings, the platform (XLA:CPU, the host's), and the net,
    the run's training steps and an epoch's where they are known. The one decision both runtimes make: as the run is
    planned (nothing known yet: what the plan prints) and again once the net and the run's length are (fit_to_run).
    An epoch shorter than auto's K is one execution an epoch; shorter than a K set by hand, it is refused."""
    loop_setting, k_setting = settings.execution_loop, settings.steps_per_execution
    loop, loop_note, loop_pending = execution_loop(loop_setting, host_platform), "", False
    if loop_setting == "auto" and host_platform:
        if net is None:
            loop_pending = True
        else:
            loop, loop_note = loop_for_net(net)
    auto = k_setting == "auto"
    k, note, pending = auto_steps(loop, run_steps) if auto else (k_setting, "", False)
    if epoch_steps is not None and k > epoch_steps:
        if not auto:
            raise ConfigError(
                f"steps_per_execution={k} is more than the {epoch_steps} training steps of an epoch; use at most "
                f"{epoch_steps}"
            )
        k = max(1, int(epoch_steps))
        note = f"{k} (auto: the steps of an epoch)"
    return Grouping(k, loop, note, loop_note, pending, loop_pending, auto)


def grouping_of(strategy) -> Grouping:
    """A Trainer's strategy's grouping: the XLA runtimes' strategies hold one; any other runs one step at a time."""
    return getattr(strategy, "grouping", None) or Grouping()
