"""A command's large C heap blocks on transparent huge pages, which XLA:CPU's per-execution buffers need.

XLA:CPU mallocs every execution's intermediates as one block (55 MB for the quickstart's step, 187 MB for the IMDB
LSTM's) and frees it after, so glibc mapped it fresh each time: 14,000 to 48,000 zeroed 4 KiB page faults an
execution, a fifth of the LSTM's step. glibc's `glibc.malloc.hugetlb=1` tunable advises huge pages for the blocks
it maps (the LSTM's step 21% shorter, same compile and memory: docs/results.md, "XLA:CPU's fresh pages per
execution"), but glibc reads it only as a process starts, so the command starts itself once more, before its
imports: execve, the same PID and arguments. Left alone: a GLIBC_TUNABLES already set (even empty: the opt-out),
other C libraries, and the Python API, which runs in the user's own process.
"""

from __future__ import annotations

import os
import sys

TUNABLE = "glibc.malloc.hugetlb=1"


def is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, OSError, ValueError):
        return False


def restart_argv(module: str) -> list[str] | None:
    """How this process was started, as an argv to start it again: `python [options] -m module ...` or
    `python [options] SCRIPT ...` (the console script); None for `python -c` or a script read from stdin."""
    args = list(getattr(sys, "orig_argv", None) or [])[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return [sys.executable, *args] if args[i + 1 : i + 2] == [module] else None
        if arg in ("-c", "-"):
            return None
        if arg.startswith("-"):
            i += 2 if arg in ("-X", "-W") else 1  # the interpreter's options that take their value apart
            continue
        return [sys.executable, *args] if os.path.isfile(arg) else None
    return None


def restart_with_huge_pages(module: str = "xla_train", execve=os.execve) -> None:
    """Execute this command again with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, where it applies; else return."""
    if "GLIBC_TUNABLES" in os.environ or not is_glibc():
        return
    argv = restart_argv(module)
    if argv is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    execve(sys.executable, argv, {**os.environ, "GLIBC_TUNABLES": TUNABLE})
