"""Every reach behind torchax's and JAX's public APIs, with the versions it was read in: torchax 0.0.13, jax 0.10.2
(pyproject.toml's `jax` extra pins them), torch 2.9.0-2.12.1 (its base range; 2.10.0 and 2.11.0 read too, the same
code). On an upgrade, this file is the audit.

The op overrides go into xla_train's own torchax Environment, not torchax's default one, so a user's own torchax code
in the same process sees those ops as shipped. The autocast fixes are process-wide, as torchax looks its policy up in its
module (amp.py): they make torchax's autocast cast what torch.autocast casts, where as shipped it raised (stack, cat)
or left float32 what torch runs in bf16 (F.linear, convolutions).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys


CONVS = ("conv1d", "conv2d", "conv3d")  # torch.nn.functional's, by name (torch is imported on first use)


@functools.cache
def environment():
    """xla_train's torchax Environment (torchax.tensor.Environment, a public class that torchax.default_env() also
    builds), with the op fixes below."""
    import torch
    from torchax.tensor import Environment

    env = Environment()
    env.override_op_definition(torch.ops.aten.native_batch_norm.default, _native_batch_norm)
    for conv in (getattr(torch.nn.functional, name) for name in CONVS):
        env.override_op_definition(conv, _after_autocast(conv))
    _autocast_as_torch_does()
    return env


def _after_autocast(conv):
    """F.convNd as torch runs it, but seen by torchax's autocast first (Environment.dispatch applies the policy to an
    op it holds): torch's conv2d checks that the input and bias dtypes agree before it decomposes into
    aten.convolution, so under bf16 the second conv of a net (its input bf16, its weights float32) raised "Input type
    (c10::BFloat16) and bias type (float) should be the same", where torch.autocast casts them first."""
    import torch

    def run(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return conv(*args, **kwargs)

    return run


def _autocast_as_torch_does() -> None:
    """Two gaps in torchax 0.0.13's autocast (amp.py), so that precision=bf16-mixed on JAX runs what torch.autocast
    runs. Its policy is keyed by the ops torchax is handed, which are not those torch's Autocast key sees: F.linear is
    one of torchax's own functions, and F.conv2d arrives decomposed as aten.convolution, so both ran in float32; they
    join the policy as torch casts them, to bf16. And amp.execute_policy reads `.dtype` off every positional argument
    for CastPolicy.PROMOTE, so torch.cat([a, b]) (its argument a list) and index_copy (an int dim) raised
    AttributeError, and a net that concatenates could not train in bf16. torch's autocast casts the floating-point
    tensors, nested ones too, to their widest type (aten/src/ATen/autocast_mode.h, promote_type); this does that for
    PROMOTE and hands every other policy to torchax's own function. tensor.py calls it as amp.execute_policy, so
    replacing the module's name is what takes effect; it is done once."""
    import torch
    from torch.utils import _pytree as pytree
    from torchax import amp

    shipped = amp.execute_policy
    if getattr(shipped, "_xla_train", False):
        return
    lower = amp.CastPolicy.LOWER_PRECISION_FP
    convs = (getattr(torch.nn.functional, name) for name in CONVS)
    for op in (torch.nn.functional.linear, torch.ops.aten.convolution.default, *convs):
        amp.autocast_policy.setdefault(op, lower)

    def is_float(a) -> bool:
        return isinstance(a, torch.Tensor) and a.is_floating_point()

    def execute_policy(policy, args, kwargs, target_lower_fp):
        if policy is not amp.CastPolicy.PROMOTE:
            return shipped(policy, args, kwargs, target_lower_fp)
        floats = [a for a in pytree.tree_leaves((args, kwargs)) if is_float(a)]
        if not floats:
            return args, kwargs
        dtypes = {a.dtype for a in floats}  # torch.promote_types is an op the mode would dispatch: by size here
        widest = max(dtypes, key=lambda d: d.itemsize)
        if sum(d.itemsize == widest.itemsize for d in dtypes) > 1:
            widest = torch.float32  # float16 with bfloat16, as torch promotes them
        return pytree.tree_map_only(torch.Tensor, lambda a: a.to(widest) if is_float(a) else a, (args, kwargs))

    execute_policy._xla_train = True
    amp.execute_policy = execute_policy


def _native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """torch's own decomposition of aten.native_batch_norm (torch/_decomp/decompositions.py, native_batch_norm,
    torch 2.9.0-2.12.1), which writes the running statistics back with copy_: torchax 0.0.13's own computes them and
    drops them, so BatchNorm's running mean and variance never moved (google/torchax#22)."""
    from torch._decomp.decompositions import native_batch_norm

    return native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


@contextlib.contextmanager
def host_tensors_as_constants():
    """A host torch tensor that torchax converts while a program is traced (torchax 0.0.13: ops/mappings.py, t2j,
    called only from Environment.t2j_copy) becomes a concrete array, a constant of the program, not a tracer: a cache
    that keeps it (preprocess/images.py's channel statistics, made on the host and moved to the device once) holds
    something the next trace can use. Only the conversion: the ops of the step stay traced, where
    jax.ensure_compile_time_eval around the whole step ran each op on concrete operands (jnp.full for torch.zeros,
    the embedding's padding row) as a program of its own (docs/results.md, "JAX's compile")."""
    import jax
    from torchax.ops import mappings

    convert = mappings.t2j

    def t2j(*args, **kwargs):
        with jax.ensure_compile_time_eval():
            return convert(*args, **kwargs)

    mappings.t2j = t2j
    try:
        yield
    finally:
        mappings.t2j = convert


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


def distributed_who() -> tuple[str, int, int]:
    """The coordinator's address, the number of processes and this process's index as jax.distributed.initialize
    resolved them, a cluster's detection included (jax._src.distributed.global_state, which State.initialize sets):
    JAX has no public answer for the address, and jax.process_index() would start the backends."""
    from jax._src import distributed

    state = distributed.global_state
    return state.coordinator_address, state.num_processes, state.process_id


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


def cpu_compiler_options(convolutions: bool) -> dict:
    """XLA:CPU options for the engine's programs (jax.jit's compiler_options, public; the options are XLA's
    DebugOptions, read in jaxlib 0.10.2). Per program: no other JAX code in the process changes.
    - Dots go to YNNPACK, as jax 0.10.2 sends them, and convolutions to XLA's own emitters, as the XLA inside
      torch_xla 2.9 compiles them. YNNPACK's convolutions made the quickstart CNN's step slower than torch_xla's where
      measured (docs/results.md, "Runtimes side by side").
    - A net without a convolution compiles at XLA's backend level 2, not 3 (xla_backend_optimization_level, LLVM's
      level on XLA:CPU): the IMDB LSTM's program compiled in less time and its steps ran no slower. A net with a
      convolution keeps XLA's default until more than one ResNet pair settles it (docs/results.md, "JAX's
      compile"). A level set in XLA_FLAGS is kept."""
    options = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
    if not convolutions and "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        options["xla_backend_optimization_level"] = 2  # a level the user gave XLA is kept
    return options
