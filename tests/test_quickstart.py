"""The README's main job, as a new user runs it: nothing set in the environment, the CNN on real digits on the XLA
path with the defaults that machine gets, then CPU predictions from its checkpoint."""

import re
import subprocess
import sys

from conftest import new_user_env


def test_quickstart_as_a_new_user_runs_it_gets_xla_cpus_plan_and_predicts_on_cpu(tmp_path):
    """No PJRT_DEVICE, no CPU_NUM_DEVICES: the plan is chosen for the device the runtime starts on (XLA:CPU here,
    no TPU on the PCI bus), not for the unset variable. 8 of the recipe's 12 epochs still train 320 steps, enough
    for steps_per_execution=auto to group 8 unrolled steps, as the README's command 1 does with 480."""
    proc = subprocess.run(
        [sys.executable, "-m", "xla_train", "recipe=quickstart", "epochs=8"],
        cwd=tmp_path,
        env=new_user_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "(accelerator xla, 1 device(s))" in out
    assert (
        "steps per execution: 8 (auto: 320 training steps >= 300, enough to pay back the longer compile), "
        "as an XLA unrolled program (execution_loop=unroll)" in out
    ), out[:2000]
    epochs = re.findall(r"^40/40 - .*\(host (-?[\d.]+)ms\)", out, re.M)
    assert len(epochs) == 8 and all(float(h) >= 0 for h in epochs), out
    acc = float(re.search(r"held-out test accuracy: ([\d.]+)", out).group(1))
    assert acc >= 0.95, out
    predictions = re.findall(r"true (\d)  predicted (\d)  p=([\d.]+)", out)
    assert len(predictions) == 5 and sum(t == p for t, p, _ in predictions) >= 4
