"""Checkpoints written as fit writes them, for tests of loading, predicting, serving and export."""

from __future__ import annotations


def save_checkpoint(path, net, init_args: dict | None, info: dict):
    """A checkpoint as fit writes one: the net's weights under `net.`, its name and init arguments (models/
    reference.py), and what inference needs (`info`, a data module's inference_info())."""
    from xla_train.checkpoint import atomic_save
    from xla_train.models.reference import NetRef

    block = {**NetRef.of(type(net), init_args).block(), **info}
    atomic_save({"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()}, "xla_train": block}, path)
    return path
