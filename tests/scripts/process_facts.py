"""What a script sees of the process it runs in, printed as JSON: tests/test_warm_start.py runs it in a fresh
interpreter and in a warm-started one, and the two must agree."""

import atexit
import json
import os
import sys

facts = {
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "on_path": os.environ.get("WARM_PROBE_PATH", "") in sys.path,
    "env": os.environ.get("WARM_PROBE"),
    "inherited": os.environ.get("PATH_ONLY_IN_PARENT"),
    "main": __name__,
    "xla_train_imported": "xla_train" in sys.modules,
}
print(json.dumps(facts))
atexit.register(lambda: print("atexit ran", end=""))  # no newline: the stream must still be flushed at the end
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
