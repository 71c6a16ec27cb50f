"""The suite's subprocess limits follow the machine (helpers.run_paced): a child that outlives its limit on a
machine shared with other test runs is waited for, as long as the known small job says the machine is slower; on a
quiet machine it fails at its limit, as a fixed limit does."""

import subprocess
import sys
import time

import pytest

from helpers import PACE_MOST, machine_pace, run_paced

SLEEP = [sys.executable, "-c", "import time; time.sleep(1.5); print('done')"]


def test_a_child_past_its_limit_is_waited_for_while_the_machine_runs_slow():
    paces = []
    proc = run_paced(SLEEP, 0.6, pace=lambda: paces.append(1) or 4.0)
    assert proc.returncode == 0 and proc.stdout == "done\n"
    assert paces == [1]  # timed once, at the first limit: 0.6 s became 2.4 s


def test_a_child_past_its_limit_on_a_quiet_machine_is_killed_at_the_limit():
    start = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        run_paced(SLEEP, 0.6, pace=lambda: 1.0)
    assert time.perf_counter() - start < 1.4  # killed, not waited for


def test_the_limit_is_timed_again_and_never_stretches_past_its_cap():
    paces = iter([2.0, 2.0])  # 0.3 -> 0.6 s; timed again at 0.6 s: still 2x, so the child is killed
    with pytest.raises(subprocess.TimeoutExpired):
        run_paced(SLEEP, 0.3, pace=lambda: next(paces))
    start = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        run_paced(SLEEP, 0.05, pace=lambda: 1000.0)  # capped at PACE_MOST times the limit
    assert time.perf_counter() - start < 0.05 * PACE_MOST + 0.5


def test_the_known_job_runs_and_reads_as_at_least_quiet():
    assert machine_pace() >= 1.0
