"""Every reach behind torchax's and JAX's public APIs, with the versions it was read in: torchax 0.0.13, jax 0.10.2,
torch 2.9.0 (pyproject.toml's `jax` extra pins them). On an upgrade, this file is the audit.

None of it is process-wide: the op overrides go into xla_train's own torchax Environment, not torchax's default one,
so a user's own torchax code in the same process sees torchax as shipped.
"""

from __future__ import annotations

import functools
import importlib.util
import sys


@functools.cache
def environment():
    """xla_train's torchax Environment (torchax.tensor.Environment, a public class that torchax.default_env() also
    builds), with the op fixes below."""
    import torch
    from torchax.tensor import Environment

    env = Environment()
    env.override_op_definition(torch.ops.aten.native_batch_norm.default, _native_batch_norm)
    return env


def _native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """torch's own decomposition of aten.native_batch_norm (torch/_decomp/decompositions.py, native_batch_norm,
    torch 2.9.0), which writes the running statistics back with copy_: torchax 0.0.13's own computes them and drops
    them, so BatchNorm's running mean and variance never moved (google/torchax#22)."""
    from torch._decomp.decompositions import native_batch_norm

    return native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


def with_prng(env, key):
    """A context in which torchax's random ops draw from `key` (Environment.override_property, public, 0.0.13): under
    jax.jit the environment's own key would be a constant of the program, the same dropout mask at every step."""
    return env.override_property(prng=key)


def with_autocast(env, dtype):
    """torchax's autocast policy (amp.py) applied to every op, bf16 for the matmuls and convolutions, as
    torch.autocast would; None: float32."""
    return env.override_property(autocast_dtype=dtype)


def backends_started() -> bool:
    """Whether JAX has started its backends in this process (jax._src.xla_bridge.backends_are_initialized): the CPU
    device count is fixed from then on."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def import_jax_keeping_numpy_rng() -> None:
    """Import jax now, where it is installed, with numpy's global RNG as it was: jax 0.10.2's import draws from it.
    torch_xla 2.9.0 imports jax itself where it can (torch_xla/debug/profiler.py, Trace.__enter__ ->
    _internal/jax_workarounds.py, maybe_get_jax), first in MpDeviceLoader's thread at its first batch, so a run's
    numpy draws depended on when that thread got there, and a resumed run's differed from the uninterrupted one's.
    Called as a run is planned, before its seed."""
    if "jax" in sys.modules or importlib.util.find_spec("jax") is None:
        return
    import numpy as np

    state = np.random.get_state()
    try:
        import jax  # noqa: F401
    except Exception:  # a broken jax is torch_xla's to skip (maybe_get_jax catches it too), not this run's to fail
        pass
    finally:
        np.random.set_state(state)


def cpu_compiler_options() -> dict:
    """XLA:CPU options for the engine's programs (jax.jit's compiler_options, public; the option is XLA's
    DebugOptions.xla_cpu_experimental_ynn_fusion_type, read in jaxlib 0.10.2): dots go to YNNPACK, as jax 0.10.2
    sends them, and convolutions to XLA's own emitters, as the XLA inside torch_xla 2.9 compiles them. YNNPACK's
    convolutions made the quickstart CNN's step slower than torch_xla's where measured (docs/results.md, "Runtimes
    side by side"). Per program: no other JAX code in the process changes."""
    return {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
