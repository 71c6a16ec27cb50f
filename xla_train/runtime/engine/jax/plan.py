"""runtime=jax: from accelerator=/devices=/strategy= to the Trainer's arguments, as runtime/plan.py decides them for
torch_xla. One process drives every device of the host through one program (as SPMD does on torch_xla); K steps
are one program, unrolled on the CPU (whose loop runs a conv net's step many times slower) and a loop elsewhere."""

from __future__ import annotations

from xla_train.errors import ConfigError, HardwareError

PRECISIONS = ("32", "32-true", "bf16", "bf16-mixed")


def plan_jax(kind, devices, strategy, precision, num_nodes, steps_per_execution, execution_loop, matmul_precision):
    from xla_train.runtime.engine.jax.backend import JAX_BACKEND
    from xla_train.runtime.engine.jax.devices import jax_devices

    if strategy not in ("auto", "spmd"):
        raise ConfigError(f"strategy={strategy!r} on runtime=jax; leave it at auto (one program drives every device)")
    if num_nodes != 1:
        raise HardwareError("runtime=jax runs on one host here; leave num_nodes unset")
    p = str(precision) if precision is not None else "32"
    if p not in PRECISIONS:
        raise ConfigError(f"precision={p!r} is not for runtime=jax; use precision=32 or precision=bf16")
    found = jax_devices(kind, devices)
    loop = JAX_BACKEND.execution_loop(execution_loop)
    if execution_loop == "auto":
        loop = "unroll" if found[0].platform == "cpu" else "while"
    note, pending = "", False
    if steps_per_execution == "auto":
        steps_per_execution, note, pending = JAX_BACKEND.auto_steps(loop)
    from xla_train.runtime.engine.jax.strategy import JaxStrategy

    from xla_train.runtime.engine.grouped_steps import Grouping

    strat = JaxStrategy(found, loop, p, matmul_precision)
    strat.plan_grouping(Grouping(steps_per_execution, loop, note, pending))
    return {"accelerator": "auto", "strategy": strat, "devices": len(found), "precision": None}
