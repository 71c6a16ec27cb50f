"""The README's main job: the CNN on real digits, on the XLA path, then CPU predictions from its checkpoint."""

import re

from conftest import run_cli


def test_quickstart_reaches_95_percent_held_out_and_predicts_on_cpu(tmp_path):
    proc = run_cli("recipe=quickstart", "epochs=3", cwd=tmp_path)
    acc = float(re.search(r"held-out test accuracy: ([\d.]+)", proc.stdout).group(1))
    assert acc >= 0.95, proc.stdout
    predictions = re.findall(r"true (\d)  predicted (\d)  p=([\d.]+)", proc.stdout)
    assert len(predictions) == 5
    assert sum(t == p for t, p, _ in predictions) >= 4
    assert "(accelerator xla, 1 device(s))" in proc.stdout
