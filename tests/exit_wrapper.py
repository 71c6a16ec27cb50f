"""Runs `python -m xla_train ARGS` through runpy, as a wrapper or a site hook would, with an atexit handler of its own
registered first. It notes each start of this file and the handler's run in the folder EXIT_WRAPPER_OUT."""

import atexit
import os
import runpy
import sys
from pathlib import Path

out = Path(os.environ["EXIT_WRAPPER_OUT"])
with open(out / "starts", "a") as f:
    f.write(f"{os.getpid()}\n")
atexit.register(lambda: (out / "atexit").write_text("ran"))
sys.argv = ["xla_train", *sys.argv[1:]]
runpy.run_module("xla_train", run_name="__main__", alter_sys=True)
