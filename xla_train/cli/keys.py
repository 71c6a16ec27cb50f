"""Every command's key=value pairs, read one way: a typed function's signature is the command's keys.

predict, export, devices and bench name their keys in a signature, and jsonargparse checks each value
against its annotation, so a wrong value gets the same one-line type error as fit's (which LightningCLI
reads from the recipe's classes). A str key takes its value as written: a review or a path is never
read as YAML ("null", "#1 film"). Python callers (api.py) come through here too.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable

from jsonargparse import ArgumentError, ArgumentParser

from xla_train.errors import ConfigError, one_line


NET_ARGS = "model.net.init_args."


def with_net_args(pairs: dict[str, str]) -> dict[str, str]:
    """fit's spelling of a net's init arguments, model.net.init_args.NAME=value, gathered into the net_args= key of
    the commands that load a checkpoint (predict, serve, export), for a net recorded without them."""
    import yaml

    rest = {k: v for k, v in pairs.items() if not k.startswith(NET_ARGS)}
    args = {}
    for key, value in pairs.items():
        if key.startswith(NET_ARGS):
            try:
                args[key[len(NET_ARGS) :]] = yaml.safe_load(value)
            except yaml.YAMLError:
                args[key[len(NET_ARGS) :]] = value
    if args:
        rest["net_args"] = yaml.safe_dump(args, default_flow_style=True).strip()
    return rest


def _annotation_has(annotation, kind) -> bool:
    return any(t is kind or typing.get_origin(t) is kind for t in (annotation, *typing.get_args(annotation)))


def _is_text(annotation) -> bool:
    return _annotation_has(annotation, str) and typing.get_origin(annotation) is not list


def keys_of(fn, skip=()) -> dict[str, inspect.Parameter]:
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n: p for n, p in inspect.signature(fn).parameters.items() if n not in skip and p.kind in named}


def spelled(fn, skip=()) -> str:
    """The keys as the command line writes them: `ckpt=` for a value, `--probs` for a switch."""
    hints = typing.get_type_hints(fn)
    return ", ".join(f"--{n}" if hints.get(n) is bool else f"{n}=" for n in keys_of(fn, skip))


def read_keys(
    fn,
    pairs: dict[str, str],
    flags=(),
    *,
    prog: str,
    skip=(),
    others: Callable[[dict[str, str]], None] | None = None,
) -> dict:
    """fn's keyword arguments from key=value pairs and --switches (a bool key given alone), checked and typed.

    Keys fn lacks go to `others` where the command takes more (bench: the recipe's settings); else they are
    refused, naming the nearest key once. A key without a default is required; an empty value is not a value.
    """
    params, hints = keys_of(fn, skip), typing.get_type_hints(fn)
    pairs = dict(pairs)
    for flag in flags:
        name = flag[2:] if flag.startswith("--") else None
        if name not in params or hints.get(name) is not bool:
            switches = [f"--{n}" for n in params if hints.get(n) is bool]
            its = f"its switches are {' and '.join(switches)}" if switches else "it takes key=value settings only"
            raise ConfigError(f"{prog} does not know {flag}; {its}")
        pairs[name] = "true"
    unknown = {k: v for k, v in pairs.items() if k not in params}
    if unknown and others is not None:
        others(unknown)
    elif unknown:
        near = [n for k in unknown for n in difflib.get_close_matches(k, list(params), n=2, cutoff=0.6)]
        hint = f"; did you mean {' or '.join(dict.fromkeys(near))}?" if near else ""
        raise ConfigError(f"{prog} takes {spelled(fn, skip)}; not {', '.join(sorted(unknown))}{hint}")
    missing = [n for n, p in params.items() if p.default is p.empty and not str(pairs.get(n, "")).strip()]
    if missing:
        raise ConfigError(f"{prog} needs {' and '.join(n + '=' for n in missing)}")
    text = {n for n in params if _is_text(hints.get(n))}
    args = []
    for key, value in pairs.items():
        if key in params and key not in text:
            listed = _annotation_has(hints[key], list) and not value.lstrip().startswith("[")
            args.append(f"--{key}=[{value}]" if listed else f"--{key}={value}")
    parser = ArgumentParser(exit_on_error=False, prog=f"xla_train {prog}")
    parser.add_function_arguments(fn, as_positional=False, skip=set(skip) | text)
    try:
        kwargs = parser.parse_args(args).as_dict()
    except ArgumentError as e:
        raise ConfigError(one_line(str(e))) from None
    kwargs.update({n: pairs.get(n, params[n].default) for n in text})
    return kwargs
