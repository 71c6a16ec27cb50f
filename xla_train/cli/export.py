"""`python -m xla_train export ckpt=PATH format=onnx|pt2 [out=PATH]`: its keys, then serve/export.py."""

from __future__ import annotations

from xla_train.cli.keys import read_keys, with_net_args


def parse(pairs: dict[str, str], flags: list[str]) -> tuple:
    return export, read_keys(export, with_net_args(pairs), flags, prog="export")


def export(ckpt: str, format: str, out: str | None = None, net: str | None = None, net_args: dict | None = None) -> int:
    """Write the checkpoint as an ONNX or .pt2 program, beside it unless out= says where. net= names the class of
    a checkpoint's own net."""
    from xla_train.serve.export import export as write

    print(f"wrote {write(ckpt, format, out or None, net, net_args)}")
    return 0
