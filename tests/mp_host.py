"""Runs `python -m xla_train ... strategy=xla_mp` as on a TPU host, emulated on XLA:CPU with one device.

On a TPU, Lightning's XLA launcher (xmp.spawn) trains in worker processes, one per
core, and the parent gets back only what the launcher returns. torch_xla calls the
function in-process when nprocs is 1, so here its multi-process path is taken for
one device: one forked worker, which needs no collective. strategy=xla_mp is
refused off a TPU (runtime/torch_xla/plan.py); here it is planned as on a TPU, over the one
XLA:CPU device. Everything else (the strategy, its launcher, the CLI) runs as is.
"""

import os
import runpy
import sys

import torch_xla._internal.pjrt as pjrt
import torch_xla.distributed.xla_multiprocessing as xmp
import torchvision.datasets.cifar as cifar
import torchvision.datasets.utils as tv_utils

import xla_train.runtime.torch_xla.plan as plan
from probes import MultiProcessOnOneCore, OneCore

cifar.check_integrity = tv_utils.check_integrity = lambda fpath, md5=None: os.path.isfile(fpath)


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn"):
    """torch_xla's pjrt.spawn for nprocs=None, whatever nprocs: run_multiprocess, and None back."""
    pjrt.run_multiprocess(pjrt._SpawnFn(fn, *args), start_method=start_method)


xmp.spawn = spawn


def as_on_a_tpu(requested, plugin=None):
    strat = MultiProcessOnOneCore(accelerator=OneCore(), precision_plugin=plugin)
    return {"accelerator": "auto", "strategy": strat, "devices": 1, "precision": None}


plan._plan_xla_multiprocess = as_on_a_tpu

if __name__ == "__main__":
    sys.argv = ["xla_train", *sys.argv[1:]]
    runpy.run_module("xla_train", run_name="__main__", alter_sys=True)
