"""A command ends as Python ends: it starts once (no re-execution of itself), and every atexit handler that a
wrapper registered before it still runs, with its output flushed."""

import sys

import pytest
from helpers import TESTS, cli_env, run_paced


@pytest.mark.parametrize(
    "args, code, said",
    [
        (["devices", "accelerator=xla"], 0, "1 CPU device"),  # torch_xla counts them in a short-lived child
        (["recipe=no_such_recipe"], 2, "xla_train: error: "),  # bad input: one line, exit code 2
    ],
    ids=["devices", "bad-input"],
)
def test_a_command_starts_once_and_leaves_every_earlier_atexit_handler_to_run(tmp_path, args, code, said):
    env = cli_env(1, EXIT_WRAPPER_OUT=str(tmp_path))
    env.pop("PYTHONUNBUFFERED")  # stdout buffered, as in a pipe: an end that skips the flush loses the output
    command = [sys.executable, str(TESTS / "exit_wrapper.py"), *args]
    proc = run_paced(command, 120, cwd=tmp_path, env=env, warm=False)  # how a real interpreter starts and ends
    assert proc.returncode == code, proc.stdout + proc.stderr[-3000:]
    assert said in proc.stdout + proc.stderr, proc.stdout + proc.stderr[-3000:]
    assert len((tmp_path / "starts").read_text().split()) == 1  # the wrapper ran once: nothing started it again
    assert (tmp_path / "atexit").read_text() == "ran"
