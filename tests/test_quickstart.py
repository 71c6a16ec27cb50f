"""The README's main job, as a new user runs it: nothing set in the environment, the CNN on real digits on the XLA
path with the defaults that machine gets, then CPU predictions from its checkpoint."""

import re
import subprocess
import sys
import threading
import time

from helpers import new_user_env

PAUSE = 3.0  # seconds the shell waits before it runs the command in its own process


def test_quickstart_as_a_new_user_runs_it_gets_xla_cpus_plan_and_predicts_on_cpu(tmp_path):
    """No PJRT_DEVICE, no CPU_NUM_DEVICES: the plan is chosen for the device the runtime starts on (XLA:CPU here,
    no TPU on the PCI bus), not for the unset variable. 4 of the recipe's 12 epochs train 160 steps, too few for
    steps_per_execution=auto's 8 unrolled steps, as the README's command 1's 480 are; the net has learnt the
    digits by then. The command is the last of a shell's (`bash -c '... && python -m xla_train ...'`), which runs
    it in its own process: its time line starts at the interpreter's start, not the shell's, PAUSE seconds
    before."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["bash", "-c", f"sleep {PAUSE} && exec {sys.executable} -m xla_train recipe=quickstart epochs=4"],
        cwd=tmp_path,
        env=new_user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)  # a full pipe would block
    reader.start()
    lines, elapsed = [], None  # elapsed: from the start to the time line's arrival
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("time: "):
            elapsed = time.perf_counter() - t0
    reader.join(timeout=600)
    assert proc.wait(timeout=600) == 0, "".join(lines)[-3000:] + "".join(err)[-3000:]
    out = "".join(lines)
    assert "(accelerator xla, 1 device(s))" in out
    assert (
        "steps per execution: 1 (auto: 160 training steps < 1,000, too few to pay back the longer compile of 8 "
        "unrolled steps; one step a program, traced once)" in out
    ), out[:2000]
    # One training program (160 executions of one step) and one validation graph: the net's BatchNorm counters went
    # to the device as data, not as constants that the first validation batch's sync compiled as a second graph.
    assert re.search(r"^compiled graphs by phase: train 1 \([\d.]+ s\), validate 1 \(", out, re.M), out[-3000:]
    epochs = re.findall(r"^40/40 - .*\(host (-?[\d.]+)ms\)", out, re.M)
    assert len(epochs) == 4 and all(float(h) >= 0 for h in epochs), out
    acc = float(re.search(r"held-out test accuracy: ([\d.]+)", out).group(1))
    # 4 epochs of 12: 0.97 on the 2-core AMD EPYC, 0.936 on a 2-core Xeon with AVX-512 (XLA:CPU's kernels and
    # their sums differ by CPU); ten digits, so chance is 0.1
    assert acc >= 0.9, out
    predictions = re.findall(r"true (\d)  predicted (\d)  p=([\d.]+)", out)
    assert len(predictions) == 5 and sum(t == p for t, p, _ in predictions) >= 4

    # The last line: where the command's time went. Every part is there and none is negative, they add up to the
    # wall time, and that wall time is the command's own from its start (imports included), not the fit's.
    last = out.strip().splitlines()[-1]
    found = dict(re.findall(r"([a-z-]+) (-?[\d.]+) s", last))
    assert last.startswith("time: ") and list(found) == ["start-up", "compile", "train", "validate", "test", "wall"], (
        last
    )
    parts, wall = [float(found[k]) for k in list(found)[:-1]], float(found["wall"])
    assert min(parts) >= 0 and abs(sum(parts) - wall) <= 0.05 * wall, last
    elapsed -= PAUSE  # the shell's wait before the interpreter started
    assert abs(wall - elapsed) <= 0.02 * elapsed + 0.5, (last, elapsed)  # the interpreter's time, imports included
    assert float(found["start-up"]) > 1.0 and float(found["compile"]) > 1.0 and float(found["test"]) > 0, last
