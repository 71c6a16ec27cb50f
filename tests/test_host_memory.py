"""A run hands the C heap's free pages back to the OS (training/host_memory.py), so its resident memory does not
creep from epoch to epoch: the trim itself, on a heap left as XLA:CPU's buffers leave it, and its place in fit
(tests/test_fit.py's run counts the trims)."""

import sys

import pytest

from helpers import SCRIPTS, script_json


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc: Linux")
def test_trim_returns_the_free_pages_a_heap_keeps_after_its_buffers_are_freed():
    seen = script_json(SCRIPTS / "host_memory_heap.py", timeout=120)
    assert seen["trimmed"], seen
    assert seen["before"] - seen["after"] >= 150, seen  # the 200 MB freed but resident until the trim
