"""The XLA runtimes the suite's `runtime` fixture (conftest.py) runs each shared guarantee on, and their CLI key."""

RUNTIME_PACKAGES = {"torch_xla": "torch_xla", "jax": "torchax"}  # a new runtime: one more entry (docs/layout.md)
RUNTIMES = tuple(RUNTIME_PACKAGES)


def runtime_key(runtime: str) -> str:
    return f"runtime={runtime}"
