"""Put first on PYTHONPATH, this stands in for a torch_xla that does not import (not installed, or built for another
torch): tests/test_jax_runtime.py runs the CLI so, as a machine without torch_xla runs it."""

raise ImportError("torch_xla is not importable here (tests/no_torch_xla)")
