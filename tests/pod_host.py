"""Runs `python -m xla_train` as one host of a pretend pod slice: XLA:CPU with FAKE_HOSTS x FAKE_LOCAL devices.

torch_xla's multi-host runtime needs several machines (XLA:CPU runs one process
only), so the runtime's answers about hosts are replaced: this process is host
FAKE_HOST of FAKE_HOSTS, and owns FAKE_LOCAL of the CPU_NUM_DEVICES devices.
The device computations are real: the global mesh spans all CPU_NUM_DEVICES,
and this host's rows become the whole (minibatch) global tensor, as if the
other hosts' rows were absent. What xla_train derives from the topology (batch
share, ranks, who writes, the host channel to the other processes) runs as on
a pod. Used with the same fixture patch as fixture_cli.py.
"""

import os
import runpy
import sys

import torch_xla.runtime as xr
import torchvision.datasets.cifar as cifar
import torchvision.datasets.utils as tv_utils

xr.process_index = lambda: int(os.environ["FAKE_HOST"])
xr.process_count = lambda: int(os.environ["FAKE_HOSTS"])
xr.addressable_runtime_device_count = lambda: int(os.environ["FAKE_LOCAL"])
cifar.check_integrity = tv_utils.check_integrity = lambda fpath, md5=None: os.path.isfile(fpath)

if __name__ == "__main__":
    sys.argv = ["xla_train", *sys.argv[1:]]
    runpy.run_module("xla_train", run_name="__main__", alter_sys=True)
