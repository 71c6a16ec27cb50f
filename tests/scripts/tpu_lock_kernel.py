"""Run by tests/test_tpu_lock.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import subprocess
import sys
import xla_train
from xla_train.runtime.registry import runtime_started

out = {"devices_before": str(xla_train.devices()), "held_after_devices": runtime_started()}
run = xla_train.fit(
    "quickstart",
    accelerator="xla",
    epochs=1,
    predict_samples=0,
    test_after_fit=False,
    **{"trainer.limit_train_batches": 2, "trainer.limit_val_batches": 1},
)
out["held_after_fit"] = runtime_started()
other = subprocess.run(
    [sys.executable, "-m", "xla_train", "devices", "accelerator=xla"], capture_output=True, text=True
)
out["other_process"] = [other.returncode, other.stderr.strip()]
sweep = xla_train.benchmark("sweep", recipe="quickstart", accelerators="xla", batch_sizes="32", steps=2, warmup=1)
out["sweep"] = [json.loads(p.read_text()) for p in sorted(sweep.glob("cells/*.json"))]
curves = xla_train.benchmark("curves", recipe="quickstart", accelerator="xla", batch_sizes="128", epochs=1)
out["curves"] = (curves / "curves.csv").read_text().splitlines()
out["devices_after"] = str(xla_train.devices("xla"))
print(json.dumps(out))
