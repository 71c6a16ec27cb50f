"""Run by tests/test_run_folders.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import sys
import runpy


class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorboard", "tensorboardX"):
            raise ModuleNotFoundError(f"No module named {name!r}")


sys.meta_path.insert(0, Block())
sys.argv = ["xla_train", *sys.argv[1:]]
runpy.run_module("xla_train", run_name="__main__", alter_sys=True)
