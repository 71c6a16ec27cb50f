"""Run by tests/test_xla_mp.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import pickle
import mp_host  # noqa: F401
from probes import built_cli

cli = built_cli({"recipe": "quickstart", "strategy": "xla_mp", "model.net.class_path": "probes.TinyNet"})
# what torch_xla's process pool pickles to each worker: the launcher's function with the Trainer and its arguments
trainer = pickle.loads(pickle.dumps((cli.trainer, cli.model, cli.datamodule)))[0]
print(sorted(type(c).__name__ for c in trainer.callbacks))
