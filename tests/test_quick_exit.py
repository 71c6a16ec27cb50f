"""cli/quick_exit.py: the program ends without Python's teardown, after everything Python's exit does first."""

import os
import subprocess
import sys

import pytest

# The program's own start (main() with no argv) around a command that leaves what an exit must take care of:
# an atexit handler, a non-daemon thread still writing, stdout and stderr with no newline, and an object whose
# __del__ only the interpreter's teardown would run.
COMMAND = """
import atexit, io, sys, threading, time, types
from pathlib import Path
import xla_train.cli.main as cli

assert isinstance(sys.stdout.buffer, io.BufferedWriter), "stdout is unbuffered: an unflushed end would not show"

out = Path(sys.argv[1])
if sys.argv[2] == "coverage":
    sys.modules["coverage"] = types.ModuleType("coverage")  # as coverage's .pth leaves it

class Teardown:
    def __del__(self):
        (out / "teardown").write_text("ran")

def command(argv):
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    threading.Thread(target=lambda: (time.sleep(0.3), (out / "thread").write_text("done"))).start()
    cli.keep = Teardown()
    sys.stdout.write("last line, no newline")
    sys.stderr.write("last warning, no newline")  # stderr is line-buffered: this waits in its buffer too
    if sys.argv[2] == "raise":
        raise RuntimeError("a bug")
    return 3

cli.run = command
sys.exit(cli.main())
"""


def end(tmp_path, how: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout buffered, as in a pipe it is
    proc = subprocess.run(
        [sys.executable, "-c", COMMAND, str(tmp_path), how], capture_output=True, text=True, timeout=60, env=env
    )
    return proc, {p.name for p in tmp_path.iterdir()}


def test_the_program_ends_with_its_code_after_threads_atexit_and_output_but_skips_the_teardown(tmp_path):
    proc, left = end(tmp_path, "return")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "last line, no newline" and proc.stderr == "last warning, no newline"
    assert left == {"atexit", "thread"}  # no "teardown": the interpreter's own ending never ran


@pytest.mark.parametrize("how", ["coverage", "raise"])
def test_under_coverage_or_after_an_error_the_program_ends_the_ordinary_way(tmp_path, how):
    proc, left = end(tmp_path, how)
    assert left == {"atexit", "thread", "teardown"}
    if how == "raise":
        assert proc.returncode == 1 and "RuntimeError: a bug" in proc.stderr
    else:
        assert proc.returncode == 3 and proc.stdout == "last line, no newline"
        assert proc.stderr == "last warning, no newline"


def test_the_python_api_never_ends_the_users_process(tmp_path):
    code = "import sys\nfrom xla_train.cli.main import main\nprint(main(['--help']) == 0)\nprint('still here')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-2:] == ["True", "still here"]
