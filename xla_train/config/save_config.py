"""The run's config.yaml writer, made to travel to strategy=xla_mp's worker processes.

Lightning's XLA launcher pickles the Trainer, its callbacks included, into each
worker (torch_xla starts them through a process pool). Lightning's
SaveConfigCallback holds the whole argument parser, which does not pickle (it
reaches logging handlers' open streams). Pickled, this one carries the config
already rendered as YAML instead, and the worker writes that text.
"""

from __future__ import annotations

import os

from lightning.pytorch.cli import SaveConfigCallback

from xla_train.checkpoint import atomic_write


class RenderedConfig:
    """Stands in for the parser in a worker: `save` writes the YAML the parser rendered in the parent."""

    def __init__(self, text: str):
        self.text = text

    def save(self, cfg, path: str, skip_none: bool = False, overwrite: bool = False, multifile: bool = True):
        if os.path.exists(path) and not overwrite:
            raise FileExistsError(path)  # what Lightning's own check before this call reports more clearly
        atomic_write(path, lambda f: f.write(self.text.encode()))


class PicklableSaveConfig(SaveConfigCallback):
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if not isinstance(self.parser, RenderedConfig):
            state["parser"] = RenderedConfig(self.parser.dump(self.config, skip_none=False))
        state["config"] = None
        return state
