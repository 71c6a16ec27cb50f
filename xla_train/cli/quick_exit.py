"""A command's end without the interpreter's teardown, which took two seconds of every XLA run.

After a command's last line Python's exit went on for 2.0-2.3 s (docs/results.md, "Start-up and exit"): garbage
collection over every object torch, Lightning and torch_xla made, then C++ destructors, none of it writing
anything. So the program ends as Python's exit begins: non-daemon threads joined, every atexit handler run
(torch_xla's wait for the device, logging's flush, temporary folders removed), output flushed; then os._exit with
the command's code. The handler is registered before the command's imports, so it runs after theirs; site code
could register one earlier, so under coverage (whose .pth does) the process ends the ordinary way. The Python API
returns to the user's process; a command that raises ends the ordinary way, traceback and all.
"""

from __future__ import annotations

import atexit
import os
import sys


class QuickExit:
    """`code`: the command's exit code once it returned; until then None, and the process ends as Python ends it."""

    def __init__(self, exit_now=os._exit) -> None:
        self.code: int | None = None
        self._exit_now = exit_now
        atexit.register(self._end)

    def _end(self) -> None:
        if self.code is None or "coverage" in sys.modules:
            return
        if "logging" in sys.modules:
            sys.modules["logging"].shutdown()  # flushes and closes every handler; a second call finds them closed
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):  # closed, replaced or gone
                pass
        self._exit_now(self.code)
