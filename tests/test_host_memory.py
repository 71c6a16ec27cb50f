"""A run hands the C heap's free pages back to the OS (training/host_memory.py), so its resident memory does not
creep from epoch to epoch: the trim itself, on a heap left as XLA:CPU's buffers leave it, and its place in fit
(tests/test_fit.py's run counts the trims)."""

import sys

import pytest

from helpers import script_json

# In a fresh process: 200 MB of 4 MB blocks in the heap (a freed 16 MB mmapped block first raises glibc's mmap
# threshold, as a run's first freed buffers do), a block above them that stays in use, then the 200 MB freed.
HEAP = """
import ctypes, json
from xla_train.training.host_memory import trim_host_heap
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
MB = 1 << 20
libc.free(libc.malloc(16 * MB))
blocks = [libc.malloc(4 * MB) for _ in range(50)]
for b in blocks:
    ctypes.memset(b, 1, 4 * MB)
above = libc.malloc(MB)
ctypes.memset(above, 1, MB)
for b in blocks:
    libc.free(b)
before = rss_mb()
trimmed = trim_host_heap()
print(json.dumps({"before": before, "after": rss_mb(), "trimmed": trimmed}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc: Linux")
def test_trim_returns_the_free_pages_a_heap_keeps_after_its_buffers_are_freed():
    seen = script_json(HEAP, timeout=120)
    assert seen["trimmed"], seen
    assert seen["before"] - seen["after"] >= 150, seen  # the 200 MB freed but resident until the trim
