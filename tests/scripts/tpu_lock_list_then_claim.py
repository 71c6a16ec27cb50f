"""Run by tests/test_tpu_lock.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import subprocess
import sys
import xla_train
from xla_train.runtime.registry import runtime_started

print(xla_train.devices())
assert not runtime_started()
claim = "from xla_train.runtime.torch_xla.devices import configure_pjrt; configure_pjrt('xla'); print('claimed')"
print(subprocess.run([sys.executable, "-c", claim], capture_output=True, text=True).stdout.strip())
