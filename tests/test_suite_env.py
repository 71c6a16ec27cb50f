"""The suite's compiler setting reaches the suite's own XLA processes and never the tests of what a new user runs."""

import os

from helpers import SUITE_XLA_FLAGS, cli_env, new_user_env


def test_the_suites_xla_processes_compile_at_its_setting():
    # this process (conftest.py), for XLA run in it; importing torch_xla appends its own flags to the variable
    assert SUITE_XLA_FLAGS in os.environ["XLA_FLAGS"].split()
    assert cli_env(8)["XLA_FLAGS"] == SUITE_XLA_FLAGS


def test_a_new_users_environment_keeps_xlas_defaults():
    assert not any(k.startswith("XLA_") for k in new_user_env())
