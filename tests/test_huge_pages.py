"""cli/huge_pages.py: a command restarts itself once with glibc's huge-page tunable, and only where it should."""

import os
import sys

import pytest

from xla_train.cli import huge_pages


@pytest.fixture
def started_as(monkeypatch):
    """Pretend this process was started by `argv` (sys.orig_argv), with no GLIBC_TUNABLES, on glibc."""
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setattr(huge_pages, "is_glibc", lambda: True)

    def start(*argv):
        monkeypatch.setattr(sys, "orig_argv", list(argv), raising=False)
        calls = []
        huge_pages.restart_with_huge_pages(execve=lambda path, args, env: calls.append((path, args, env)))
        return calls

    return start


def test_a_module_run_restarts_itself_with_the_tunable_and_its_own_arguments(started_as):
    calls = started_as("python3", "-X", "importtime", "-m", "xla_train", "recipe=quickstart", "-c")
    assert len(calls) == 1
    path, args, env = calls[0]
    assert path == sys.executable and args == [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "xla_train",
        "recipe=quickstart",
        "-c",
    ]
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1" and env["PATH"] == os.environ["PATH"]


def test_the_console_script_restarts_as_itself(started_as, tmp_path):
    script = tmp_path / "xla_train"
    script.write_text("#!/usr/bin/env python\n")
    calls = started_as("/venv/bin/python", str(script), "fit", "recipe=imdb")
    assert [c[1] for c in calls] == [[sys.executable, str(script), "fit", "recipe=imdb"]]


@pytest.mark.parametrize(
    "argv",
    [
        ("python", "-c", "from xla_train.cli.main import main; main()"),  # not restartable as it was
        ("python", "-", "recipe=quickstart"),  # a script read from stdin
        ("python", "-m", "other_tool", "xla_train"),  # another module
        ("python", "no_such_file.py"),
    ],
)
def test_what_cannot_be_started_again_is_left_alone(started_as, argv):
    assert started_as(*argv) == []


def test_a_tunables_setting_of_the_users_own_or_another_c_library_is_left_alone(started_as, monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "")  # set, even empty: the user's opt-out
    assert started_as("python", "-m", "xla_train") == []
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setattr(huge_pages, "is_glibc", lambda: False)
    assert started_as("python", "-m", "xla_train") == []
