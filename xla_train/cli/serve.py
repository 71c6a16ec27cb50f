"""`python -m xla_train serve ckpt=PATH [host= port= max_batch_size= batch_timeout= workers= max_body_mb=
                                      body_timeout=]`.

Its keys are serve()'s typed signature (cli/keys.py); the server itself is serve/server.py, on LitServe
(pip install 'xla_train[serve]'). The recipe shown by /info comes from the checkpoint's run folder, if any.
"""

from __future__ import annotations

from typing import Literal

from jsonargparse.typing import NonNegativeFloat, PositiveFloat, PositiveInt

from xla_train.cli.keys import read_keys, with_net_args


def parse(pairs: dict[str, str], flags: list[str]) -> tuple:
    return serve, read_keys(serve, with_net_args(pairs), flags, prog="serve")


def serve(
    ckpt: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_batch_size: PositiveInt = 32,
    batch_timeout: NonNegativeFloat = 0.005,
    workers: PositiveInt = 1,
    max_body_mb: PositiveFloat = 4.0,
    body_timeout: PositiveFloat = 10.0,
    threads: PositiveInt | Literal["auto"] = "auto",
    net: str | None = None,
    net_args: dict | None = None,
) -> int:
    """Serve the checkpoint over HTTP until SIGTERM or Ctrl+C. net= names the class of a checkpoint's own net;
    body_timeout is how long a request's body may pause before it is refused; threads, each worker's compute
    threads (auto: the cores, less one for the HTTP front, shared among the workers)."""
    from xla_train.serve.server import serve as run

    return run(
        ckpt,
        host,
        port,
        max_batch_size,
        batch_timeout,
        workers,
        max_body_mb,
        body_timeout,
        threads,
        net,
        net_args,
        recipe=recipe_of(ckpt),
    )


def recipe_of(ckpt: str) -> str | None:
    import yaml

    from xla_train.training.run_folder import RunFolder  # no Lightning: a folder and its files

    run = RunFolder.of_checkpoint(ckpt)
    if run is None:
        return None
    try:
        return (yaml.safe_load(run.config.read_text()) or {}).get("recipe_name") or run.path.parent.name
    except (OSError, yaml.YAMLError):
        return None
