"""A Jupyter kernel forked from the suite's warm-start server (helpers/warm_start.py), so that a notebook test does
not spend its kernel's first seconds importing torch and Lightning again.

Jupyter starts this small process as the kernel (its kernelspec: warm_start.kernel_spec). It asks the server for
`python -m ipykernel_launcher ARGS` with its own stdout and stderr, passes on the signals Jupyter sends the kernel
(an interrupt, a termination) and ends with the kernel's exit status. It imports no more than the standard library.
"""

import importlib.util
import json
import os
import signal
import sys

_spec = importlib.util.spec_from_file_location(
    "warm_start", os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers", "warm_start.py")
)
warm_start = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(warm_start)

# A fresh kernel draws charts inline because ipykernel sets MPLBACKEND before matplotlib is imported; in the server,
# matplotlib is imported already (Lightning imports torchmetrics, which imports it), so the kernel asks for inline.
command = [sys.executable, "-m", "ipykernel_launcher", "--matplotlib=inline", *sys.argv[1:]]


def forward(number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:  # the kernel has ended; its status is on its way
        pass


conn, reply, pid = warm_start.request_child(os.environ[warm_start.SOCKET_ENV], command, os.getcwd(), os.environ, 1, 2)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda number, frame: forward(number))
code = json.loads(reply.readline())["returncode"]
sys.exit(code if code >= 0 else 128 - code)
