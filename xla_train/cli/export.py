"""`python -m xla_train export ckpt=PATH format=onnx|pt2 [out=PATH]`: its keys, then serve/export.py."""

from __future__ import annotations

from xla_train.errors import ConfigError

KEYS = ("ckpt", "format", "out")


def export_command(pairs: dict[str, str], flags: list[str]) -> int:
    unknown = sorted(set(pairs) - set(KEYS))
    if unknown or flags:
        raise ConfigError(f"export takes {', '.join(k + '=' for k in KEYS)}; not {', '.join(unknown + flags)}")
    for key in ("ckpt", "format"):
        if not pairs.get(key, "").strip():
            raise ConfigError(f"export needs {key}=: e.g. python -m xla_train export ckpt=runs/x/last.ckpt format=onnx")
    from xla_train.serve.export import export

    path = export(pairs["ckpt"], pairs["format"], pairs.get("out") or None)
    print(f"wrote {path}")
    return 0
