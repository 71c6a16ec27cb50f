"""Runs tests/fixture_cli.py (the real CLI) with the network refused loudly: every DNS lookup or connection
prints NETWORK ATTEMPT on stderr and fails. `--selftest` instead asks torch_xla for the TPU metadata the
way it would on a TPU VM, to show that such a call cannot slip past."""

import os
import runpy
import socket
import sys

MARK = "NETWORK ATTEMPT"


def refuse(*args, **kwargs):
    print(
        f"{MARK}: {args[1:3] if args and isinstance(args[0], socket.socket) else args[:2]}", file=sys.stderr, flush=True
    )
    raise OSError(f"{MARK}: this run must not touch the network")


socket.getaddrinfo = socket.create_connection = refuse
socket.socket.connect = socket.socket.connect_ex = refuse

if sys.argv[1:] == ["--selftest"]:
    from torch_xla._internal import tpu

    try:
        tpu._get_metadata("tpu-env")
    except Exception as e:
        print(f"metadata refused: {type(e).__name__}")
    sys.exit(0)
sys.argv = [os.path.join(os.path.dirname(__file__), "fixture_cli.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
