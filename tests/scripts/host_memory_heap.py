"""Run by tests/test_host_memory.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

# In a fresh process: 200 MB of 4 MB blocks in the heap (a freed 16 MB mmapped block first raises glibc's mmap
# threshold, as a run's first freed buffers do), a block above them that stays in use, then the 200 MB freed.

import ctypes
import json
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
