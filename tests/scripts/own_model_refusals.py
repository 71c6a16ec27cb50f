"""Run by tests/test_own_model.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import sys
from xla_train.cli.main import main

ckpt, inputs, config = sys.argv[1:4]
codes = [
    main(["predict", f"ckpt={ckpt}", f"inputs={inputs}"]),
    main(["export", f"ckpt={ckpt}", "format=pt2", "out=x.pt2"]),
    main(["serve", f"ckpt={ckpt}", "port=1"]),  # a port refused after the load: were the net loaded, it ends
    main(["predict", f"ckpt={ckpt}", "split=test"]),
    main(["test", f"ckpt={ckpt}", f"recipe={config}"]),
]
import xla_train

try:
    xla_train.load_for_inference(ckpt)
except xla_train.errors.UserError as e:
    print("python:", e, file=sys.stderr)
print(codes, "user_nets" in sys.modules)
