"""`xla_train devices`, a new machine's first command: it answers without Lightning in either of its processes
(runtime/devices.py)."""

from __future__ import annotations

import json

from helpers import cli_env, script_json
from xla_train.runtime.torch_xla.devices import _LIST

LIGHTNING = "lightning.pytorch", "lightning.fabric", "torchmetrics"


def test_listing_xla_devices_imports_no_lightning_in_this_process():
    out = script_json(
        "import json, sys\n"
        "import xla_train\n"
        "report = xla_train.devices('xla')\n"
        f"print(json.dumps({{'count': report.count, 'hardware': report.hardware, "
        f"'imported': [m for m in {LIGHTNING!r} if m in sys.modules]}}))",
        env=cli_env(2),
        warm=False,  # a warm-started process has Lightning imported already
    )
    assert out == {"count": 2, "hardware": "CPU", "imported": []}


def test_the_process_that_counts_the_devices_imports_no_lightning():
    code = _LIST.format(kind="xla") + (
        f"import sys\nprint(json.dumps({{'imported': [m for m in {LIGHTNING!r} if m in sys.modules]}}))"
    )
    out = script_json(code, env=cli_env(1), warm=False)
    assert out == {"imported": []}
    listed = script_json(_LIST.format(kind="xla"), env=cli_env(3))
    assert listed == {"count": 3, "kind": "CPU", "pjrt": "CPU"}, json.dumps(listed)
