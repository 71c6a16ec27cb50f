"""A command's large C heap blocks on transparent huge pages: XLA:CPU's per-execution buffers fault far less.

XLA:CPU mallocs each execution's temporary buffer, every intermediate of the program (55 MB for the quickstart's
step, 115 MB for its 4 unrolled steps, 187 MB for the IMDB LSTM's), and frees it when the execution ends. glibc
maps a block that large fresh from the kernel and unmaps it on free, so every execution faulted in 14,000 to
48,000 zeroed 4 KiB pages, a fifth of the LSTM's step. glibc's `glibc.malloc.hugetlb=1` tunable advises
transparent huge pages for the blocks it maps: the LSTM's pipelined step 21% shorter and the quickstart's up to
13%, at the same compile time and peak memory (docs/results.md, "XLA:CPU's fresh pages per execution"). glibc
reads its tunables only as a process starts, so the command executes itself again, once, before its imports,
with GLIBC_TUNABLES set: the same process (execve keeps the PID), the same arguments.

Left alone: a GLIBC_TUNABLES already in the environment (set it, even empty, to opt out), a C library other than
glibc (glibc before 2.35 ignores the tunable), and the Python API, which runs in the user's own process (start
Jupyter with the variable to have it there). A kernel with transparent huge pages off ignores the advice; on a
TPU the device's buffers are not this heap, and the host's large blocks (batches, checkpoints) gain the same way.
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


def restart_command(module: str) -> list[str] | None:
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
    argv = restart_command(module)
    if argv is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    execve(sys.executable, argv, {**os.environ, "GLIBC_TUNABLES": TUNABLE})
