"""Run by tests/test_registry.py in a fresh interpreter: a short fit on the runtime named in argv, then which XLA
runtimes' packages the process loaded, as JSON on its last line."""

import json
import resource
import sys

from xla_train.cli.main import main

code = main(sys.argv[1:])
loaded = {name: name in sys.modules for name in ("torch_xla", "jax", "jaxlib", "torchax")}
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"code": code, "loaded": loaded, "peak_mb": peak_mb}))
