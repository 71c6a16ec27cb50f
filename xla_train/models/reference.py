"""How a checkpoint names its net, and how a net is built again from that name without importing on a file's word.

A built-in net is named by its key (the loader can only build one of NETS); any other net by the import path it
was trained from and its init arguments, and the loader imports that path only when the user names the same
class. The init arguments are what the recipe or command line gave, defaults filled in, for every net alike; a
net handed to fit as an instance has none recorded unless its class takes none (docs/own_model.md).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

from torch import nn

from xla_train.errors import CheckpointError, ConfigError
from xla_train.models.cnn import CifarCNN
from xla_train.models.lstm import SentimentLSTM
from xla_train.models.resnet import CifarResNet

NETS = {cls.arch: cls for cls in (CifarCNN, CifarResNet, SentimentLSTM)}
BUILTIN_MODULE = "xla_train.models"  # the public path of the built-in nets: xla_train.models.CifarCNN
PLAIN = (str, int, float, bool, type(None))


def class_path_of(cls: type) -> str:
    """The import path of a net class; a built-in net's public one."""
    if NETS.get(getattr(cls, "arch", None)) is cls:
        return f"{BUILTIN_MODULE}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def builtin_key(class_path: str) -> str | None:
    """The key of the built-in net a class path names (its public or defining path), else None."""
    for key, cls in NETS.items():
        if class_path in (f"{BUILTIN_MODULE}.{cls.__name__}", f"{cls.__module__}.{cls.__qualname__}"):
            return key
    return None


def _plain(value) -> bool:
    """What a weights-only load reads back and a constructor can take again: no objects, no class specs."""
    if isinstance(value, PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return "class_path" not in value and all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # a C-defined __init__: nothing can be said of its arguments
        return {"*": inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)}
    return {n: p for n, p in params.items() if n != "self"}


def complete_args(cls: type, given: dict | None) -> dict | None:
    """The init arguments with every default filled in, or None where they cannot be recorded: not given (an
    instance; {} for a class that takes none), or not plain values (a submodule, a tensor)."""
    params = _parameters(cls)
    if given is None:
        return {} if not params else None
    args = dict(given)
    for name, p in params.items():
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in args and p.default is not p.empty:
            args[name] = p.default
    return args if _plain(args) else None


@dataclass(frozen=True)
class NetRef:
    """A net's name in a checkpoint: its class path, its built-in key (or None) and its init arguments (or None)."""

    class_path: str
    init_args: dict | None

    @property
    def key(self) -> str | None:
        return builtin_key(self.class_path)

    @classmethod
    def of(cls, net_class: type, init_args: dict | None = None) -> NetRef:
        return cls(class_path_of(net_class), complete_args(net_class, init_args))

    def block(self) -> dict:
        """What the checkpoint stores: a built-in net by key (format 1, as every earlier xla_train wrote), any
        other by its class path (format 2, which an earlier xla_train refuses by its format, in one line)."""
        if self.key is not None:
            return {"format": 1, "arch": self.key, "config": self.init_args}
        return {"format": 2, "class_path": self.class_path, "init_args": self.init_args}

    @classmethod
    def from_block(cls, block: dict, path) -> NetRef:
        if "arch" in block:
            if block["arch"] not in NETS:
                raise CheckpointError(
                    f"{path} names a net this xla_train cannot build: unknown architecture {block['arch']!r}; "
                    f"known: {', '.join(sorted(NETS))}"
                )
            net_class = NETS[block["arch"]]  # defaults filled in: a later release may add an argument
            config = block.get("config")
            return cls(class_path_of(net_class), None if config is None else complete_args(net_class, config))
        if not isinstance(block.get("class_path"), str) or not _plain(block.get("init_args")):
            raise CheckpointError(f"{path} has an xla_train block that names no net (no arch or class_path)")
        return cls(block["class_path"], block.get("init_args"))

    @property
    def name(self) -> str:
        """How messages name it: the key of a built-in net, else the class path."""
        return self.key or self.class_path

    def same_net(self, other: NetRef) -> bool:
        """The same class, and the same init arguments wherever both are recorded."""
        if self.class_path != other.class_path:
            return False
        return self.init_args is None or other.init_args is None or self.init_args == other.init_args


def import_class(class_path: str) -> type:
    """A class the user named (on the command line, in a recipe or in Python): imported, and an nn.Module."""
    module, _, name = class_path.rpartition(".")
    try:
        if not module:
            raise ImportError("not a module path")
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # ImportError, AttributeError, or the module's own error on import
        reason = f"{type(e).__name__}: {str(e).splitlines()[0]}" if str(e) else type(e).__name__
        raise ConfigError(
            f"the net class {class_path!r} cannot be imported ({reason}); give its full import path, "
            f"package.module.Class, with its folder on PYTHONPATH"
        ) from None
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise ConfigError(f"{class_path!r} is not an nn.Module class; the net must be a torch.nn.Module subclass")
    return obj


def build(ref: NetRef, path, given=None, args: dict | None = None) -> nn.Module:
    """The checkpoint's net, unreplicated and untrained: a built-in one from its key, a user's only from the class
    or instance `given` by the user (a class path, a class or an nn.Module), which must be the recorded one.
    `args` are init arguments the user gives for a net recorded without them."""
    if given is None and ref.key is None:
        raise unnamed(ref, path)
    if isinstance(given, nn.Module):
        _check_named(ref, type(given), path)
        return given
    cls = NETS[ref.key] if given is None else import_class(given) if isinstance(given, str) else given
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"net={given!r} is neither an nn.Module class nor an instance of one")
    _check_named(ref, cls, path)
    init_args = {**(ref.init_args or {}), **(args or {})}
    if ref.init_args is None and not args and _parameters(cls):
        raise CheckpointError(
            f"{path} records no init arguments for its {ref.name} net (fit was given an instance); pass an instance "
            f"built as for training (net=ClassName(...) in Python), or the arguments: model.net.init_args.NAME=value"
        )
    try:
        return cls(**init_args)
    except Exception as e:  # the class refuses the recorded arguments
        raise CheckpointError(
            f"{path}: {ref.class_path}({', '.join(f'{k}={v!r}' for k, v in init_args.items())}) failed: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None


def unnamed(ref: NetRef, path) -> CheckpointError:
    """A checkpoint of a user's net, loaded without the user naming its class: what to give instead."""
    short = ref.class_path.rsplit(".", 1)[-1]
    return CheckpointError(
        f"{path} holds a net of class {ref.class_path}, which xla_train does not import because a file names "
        f"it; name the class yourself: net={ref.class_path} (in Python: net={short}, the class or an instance)"
    )


def _check_named(ref: NetRef, cls: type, path) -> None:
    if class_path_of(cls) != ref.class_path:
        raise CheckpointError(
            f"{path} was trained with the net {ref.class_path}, but net= names {class_path_of(cls)}; "
            f"name the class it was trained with"
        )
