"""Run by tests/test_host_memory.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

# 200 MB of 100 KB blocks: under glibc's smallest mmap threshold (128 KB), so they come from the heap whatever the
# process did before (importing jax leaves 4 MB blocks mmapped, so freeing them unmapped them at once). The block with
# the highest address stays in use, above the others, so freeing them cannot shrink the heap's top: the 200 MB stay
# resident, in free chunks, until the trim.

import ctypes
import json
from xla_train.training.host_memory import trim_host_heap

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


SIZE = 100 << 10
blocks = [libc.malloc(SIZE) for _ in range(2048)]
for b in blocks:
    ctypes.memset(b, 1, SIZE)
above = max(blocks)
for b in blocks:
    if b != above:
        libc.free(b)
before = rss_mb()
trimmed = trim_host_heap()
print(json.dumps({"before": before, "after": rss_mb(), "trimmed": trimmed}))
