"""The engines: what an XLA runtime does for a fit (trace the step once, K steps as one program, placement on a
device mesh, per-step random keys, compile counting, the state back as torch tensors). jax/ is runtime=jax's; the
torch_xla/ is runtime=torch_xla's. Both sit behind interface.py, and grouped_steps.py is their strategies' shared Lightning side."""
