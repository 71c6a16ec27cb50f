"""The suite's warm-started subprocesses (helpers/warm_start.py) run a script as a fresh `python` would: the same
argv, folder, environment, sys.path and __main__, its own exit code, atexit handlers run and streams flushed, and
none of xla_train imported before the script imports it."""

import sys

import pytest

from helpers import SCRIPTS, run_paced, warm_start
from helpers.warm_start import WarmProcess

PROBE = [sys.executable, str(SCRIPTS / "process_facts.py")]


def both(command, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH_ONLY_IN_PARENT", "1")  # the child's environment is `env`, not the caller's
    env = {"PATH": "/usr/bin:/bin", "WARM_PROBE": "yes", "WARM_PROBE_PATH": str(tmp_path), "PYTHONPATH": str(tmp_path)}
    return [run_paced(command, 120, cwd=tmp_path, env=env, warm=warm) for warm in (False, True)]


@pytest.mark.parametrize("code", [0, 3])
def test_a_warm_child_sees_what_a_fresh_one_sees_and_ends_alike(tmp_path, monkeypatch, code):
    cold, warm = both([*PROBE, str(code)], tmp_path, monkeypatch)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert cold.returncode == code and cold.stdout.endswith("atexit ran")
    assert '"path0": "' + str(SCRIPTS) in cold.stdout and '"env": "yes"' in cold.stdout
    assert '"inherited": null' in cold.stdout and '"xla_train_imported": false' in cold.stdout


def test_code_given_with_c_and_an_uncaught_error_end_as_in_a_fresh_interpreter(tmp_path, monkeypatch):
    code = "import os, sys; print(__name__, os.getcwd() == sys.argv[1] and sys.path[0]); raise ValueError('no')"
    cold, warm = both([sys.executable, "-c", code, str(tmp_path)], tmp_path, monkeypatch)
    assert cold.returncode == warm.returncode == 1 and cold.stdout == warm.stdout == "__main__ \n"
    assert cold.stderr.splitlines()[-1] == warm.stderr.splitlines()[-1] == "ValueError: no"


def test_a_warm_child_is_forked_from_the_server_with_torch_already_imported(tmp_path):
    code = "import os, sys; print(os.getppid(), 'torch' in sys.modules)"
    with WarmProcess([sys.executable, "-c", code], cwd=tmp_path, env={}) as proc:
        out, _ = proc.communicate(60)
    assert proc.returncode == 0 and out.split() == [str(warm_start._server.pid), "True"], out


def test_a_warm_childs_own_python_children_start_warm_and_report_as_subprocess_run_does(tmp_path, monkeypatch):
    """What the product starts with subprocess.run (a benchmark cell, a device count) is forked from the server too,
    with the same output, exit code, time limit and check as a fresh process's."""
    log = tmp_path / "child.log"
    cold, warm = both([sys.executable, str(SCRIPTS / "python_children.py"), str(log)], tmp_path, monkeypatch)
    assert cold.returncode == warm.returncode == 0, cold.stderr + warm.stderr
    assert cold.stdout == '[3, "False\\n", "err\\n", null, "timed out", 2]\n', cold.stdout
    assert warm.stdout == cold.stdout.replace("False", "True")  # its grandchild had torch imported: it came warm
    assert sorted(log.read_text().splitlines()) == ["err", "out"]  # both streams into the file (the warm run's)
