"""runtime=jax: JAX through torchax. The only package that imports jax or torchax (tests/test_layout.py)."""
