"""The engines: what an XLA runtime does for a fit (trace the step once, K steps as one program, placement on a
device mesh, per-step random keys, compile counting, the state back as torch tensors). jax/ is runtime=jax's; the
torch_xla runtime's engine is still the XLA strategies' mixins (runtime/steps_per_execution.py, runtime/spmd.py)."""
