"""How a checkpoint names its net, and how a net is built again from that name without importing on a file's word.

A built-in net is named by its key (the loader can only build one of NETS); any other net by the import path it
was trained from (a class, or a builder: a function that returns the net, as torchvision.models.resnet18) and its
init arguments, and the loader imports that path only when the user names the same one. The init arguments are
what the recipe or command line gave, defaults filled in, for every net alike; a class or function among them is
recorded as its import path ({"import": path}) and imported again only from torch, torchvision, timm or the net's
own module. A net handed to fit as an instance has none recorded unless its class takes none (docs/own_model.md).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from xla_train.errors import CheckpointError, ConfigError
from xla_train.models.cnn import CifarCNN
from xla_train.models.lstm import SentimentLSTM
from xla_train.models.resnet import CifarResNet

NETS = {cls.arch: cls for cls in (CifarCNN, CifarResNet, SentimentLSTM)}
BUILTIN_MODULE = "xla_train.models"  # the public path of the built-in nets: xla_train.models.CifarCNN
PLAIN = (str, int, float, bool, type(None))


TRUSTED_MODULES = ("torch", "torchvision", "timm")  # whose classes a recorded argument may name


def class_path_of(cls) -> str:
    """The import path of a net class or builder function; a built-in net's public one."""
    if NETS.get(getattr(cls, "arch", None)) is cls:
        return f"{BUILTIN_MODULE}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def is_builder(obj) -> bool:
    """A function (or other callable that is not a class) that returns the net."""
    return callable(obj) and not isinstance(obj, type)


def builtin_key(class_path: str) -> str | None:
    """The key of the built-in net a class path names (its public or defining path), else None."""
    for key, cls in NETS.items():
        if class_path in (f"{BUILTIN_MODULE}.{cls.__name__}", f"{cls.__module__}.{cls.__qualname__}"):
            return key
    return None


def _imported(value) -> bool:
    return isinstance(value, dict) and set(value) == {"import"} and isinstance(value["import"], str)


def _plain(value) -> bool:
    """What a weights-only load reads back and a constructor can take again: no objects, no class specs (a class
    or function argument is recorded as {"import": path})."""
    if isinstance(value, PLAIN) or _imported(value):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return "class_path" not in value and all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _parameters(obj) -> dict[str, inspect.Parameter]:
    """A net class's init parameters, or a builder's."""
    try:
        params = inspect.signature(obj.__init__ if isinstance(obj, type) else obj).parameters
    except (TypeError, ValueError):  # a C-defined __init__: nothing can be said of its arguments
        return {"*": inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)}
    return {n: p for n, p in params.items() if n != "self"}


def parameter_names(obj) -> tuple[list[str], bool]:
    """(the named init parameters of a class or builder, whether it also takes any keyword: **kwargs)."""
    params = _parameters(obj).values()
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return named, any(p.kind == p.VAR_KEYWORD for p in params)


def _recordable(value):
    """A class or function argument as its import path; anything else as it is."""
    if isinstance(value, type) or inspect.isfunction(value):
        return {"import": f"{value.__module__}.{value.__qualname__}"}
    if isinstance(value, (list, tuple)):
        return [_recordable(v) for v in value]
    return value


def complete_args(cls, given: dict | None) -> dict | None:
    """The init arguments with every default filled in, or None where they cannot be recorded: not given (an
    instance; {} for a class that takes none), or not plain values (a submodule, a tensor)."""
    params = _parameters(cls)
    if given is None:
        return {} if not params else None
    args = {k: _recordable(v) for k, v in given.items()}
    for name, p in params.items():
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in args and p.default is not p.empty:
            args[name] = _recordable(p.default)
    return args if _plain(args) else None


def unrecordable(given: dict | None) -> str | None:
    """Why init arguments were not recorded, in words for the error that will need them."""
    if given is None:
        return "fit was given an instance, whose arguments are its own"
    bad = [k for k, v in given.items() if not _plain(_recordable(v))]
    return f"its argument {bad[0]!r} is a {type(given[bad[0]]).__name__}, not a plain value" if bad else None


@dataclass(frozen=True)
class NetRef:
    """A net's name in a checkpoint: its class path, its built-in key (or None) and its init arguments (or None)."""

    class_path: str
    init_args: dict | None
    built_class: str | None = None  # a builder's: the class of the net it built
    no_args: str | None = None  # why init_args is None

    @property
    def key(self) -> str | None:
        return builtin_key(self.class_path)

    @classmethod
    def of(cls, net_class, init_args: dict | None = None, built=None) -> NetRef:
        """`net_class`: the class or builder named; `built`: the net a builder returned."""
        args = complete_args(net_class, init_args)
        why = unrecordable(init_args) if args is None else None
        return cls(class_path_of(net_class), args, class_path_of(type(built)) if built is not None else None, why)

    def block(self) -> dict:
        """What the checkpoint stores: a built-in net by key (format 1, as every earlier xla_train wrote), any
        other by its class path (format 2, which an earlier xla_train refuses by its format, in one line)."""
        if self.key is not None:
            return {"format": 1, "arch": self.key, "config": self.init_args}
        extra = {k: v for k, v in (("built_class", self.built_class), ("no_init_args", self.no_args)) if v}
        return {"format": 2, "class_path": self.class_path, "init_args": self.init_args, **extra}

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
        text = [block.get(k) if isinstance(block.get(k), str) else None for k in ("built_class", "no_init_args")]
        return cls(block["class_path"], block.get("init_args"), *text)

    def plain_args(self) -> dict:
        """The recorded arguments a command line can give again (classes recorded as paths left out)."""
        return {k: v for k, v in (self.init_args or {}).items() if not _imported(v)}

    @property
    def name(self) -> str:
        """How messages name it: the key of a built-in net, else the class path."""
        return self.key or self.class_path

    def same_net(self, other: NetRef) -> bool:
        """The same class, and the same init arguments wherever both are recorded."""
        if self.class_path != other.class_path:
            return False
        return self.init_args is None or other.init_args is None or self.init_args == other.init_args


def import_class(class_path: str):
    """A net the user named (on the command line, in a recipe or in Python): imported, and an nn.Module class or
    a builder (a function that returns one)."""
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
    if not ((isinstance(obj, type) and issubclass(obj, nn.Module)) or is_builder(obj)):
        raise ConfigError(
            f"{class_path!r} is neither an nn.Module class nor a function that returns one; name the net's class "
            f"or its builder (as torchvision.models.resnet18)"
        )
    return obj


def build(ref: NetRef, path, given=None, args: dict | None = None) -> nn.Module:
    """The checkpoint's net, unreplicated and untrained: a built-in one from its key, a user's only from the class,
    builder or instance `given` by the user (a path, the object, or an nn.Module), which must be the recorded one.
    `args` are init arguments the user gives, over the recorded ones (or for a net recorded without them)."""
    if given is None and ref.key is None:
        raise unnamed(ref, path)
    if isinstance(given, nn.Module):
        _check_named(ref, type(given), path)
        return given
    maker = NETS[ref.key] if given is None else import_class(given) if isinstance(given, str) else given
    if not ((isinstance(maker, type) and issubclass(maker, nn.Module)) or is_builder(maker)):
        raise ConfigError(f"net={given!r} is neither an nn.Module class, a function that returns one, nor an instance")
    _check_named(ref, maker, path)
    given_args = dict(args or {})
    for k, v in given_args.items():  # the user's word: a path given for a class argument is imported
        if isinstance(v, str) and _imported((ref.init_args or {}).get(k)):
            given_args[k] = _import_path(v, f"model.net.init_args.{k}={v}")
    recorded = {k: _resolve(v, k, ref, path) for k, v in (ref.init_args or {}).items() if k not in given_args}
    init_args = {**recorded, **given_args}
    try:
        net = maker(**init_args)
    except Exception as e:  # the class refuses the arguments, or lacks some a net recorded without them needs
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if ref.init_args is None:
            raise CheckpointError(
                f"{path} records no init arguments for its {ref.name} net ({ref.no_args or 'none recorded'}), and "
                f"{ref.class_path}({_call_text(init_args)}) failed ({reason}); give them: "
                f"model.net.init_args.NAME=value (in Python, an instance built as for training)"
            ) from None
        raise CheckpointError(f"{path}: {ref.class_path}({_call_text(init_args)}) failed: {reason}") from None
    if not isinstance(net, nn.Module):
        raise CheckpointError(f"{path}: {ref.class_path}(...) returned a {type(net).__name__}, not an nn.Module")
    return net


def build_with(builder: Callable, path: str, args: dict) -> nn.Module:
    """fit's net from a builder the user named by `path` (config/run_spec.py: imported there), or one line. It stands
    at model.net for jsonargparse to call, as it builds a class, once the run's seed is set."""
    try:
        net = builder(**args)
    except Exception as e:
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise ConfigError(f"net={path} failed with {_call_text(args) or 'no arguments'}: {reason}") from None
    if not isinstance(net, nn.Module):
        raise ConfigError(f"net={path} returned a {type(net).__name__}, not an nn.Module; name a builder of a net")
    return net


def _call_text(args: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def _resolve(value, name: str, ref: NetRef, path):
    """A recorded argument back as it was given: {"import": path} as the class or function it names, imported only
    from torch, torchvision, timm or the module of the net the user named; else one line."""
    if isinstance(value, list):
        return [_resolve(v, name, ref, path) for v in value]
    if not _imported(value):
        return value
    target = value["import"]
    own = ref.class_path.rpartition(".")[0]
    if target.split(".")[0] in TRUSTED_MODULES or (own and target.startswith(own + ".")):
        return _import_path(target, f"{path}: its init argument {name}={target}")
    raise CheckpointError(
        f"{path} names {target} as the init argument {name!r}; xla_train imports what a file names only from "
        f"torch, torchvision, timm or the net's own module ({own}); give it yourself: "
        f"model.net.init_args.{name}={target} (in Python, args={{'{name}': ...}})"
    )


def _import_path(target: str, what: str):
    module, _, attr = target.rpartition(".")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    except Exception as e:  # ImportError, AttributeError, or the module's own error on import
        raise CheckpointError(f"{what} cannot be imported ({type(e).__name__})") from None


def unnamed(ref: NetRef, path) -> CheckpointError:
    """A checkpoint of a user's net, loaded without the user naming its class: what to give instead."""
    short = ref.class_path.rsplit(".", 1)[-1]
    return CheckpointError(
        f"{path} holds a net of class {ref.class_path}, which xla_train does not import because a file names "
        f"it; name the class yourself: net={ref.class_path} (in Python: net={short}, the class or an instance)"
    )


def _check_named(ref: NetRef, cls, path) -> None:
    """The named class or builder must be the recorded one (an instance's class may be what the builder built)."""
    named = class_path_of(cls)
    if named != ref.class_path and not (isinstance(cls, type) and named == ref.built_class):
        raise CheckpointError(
            f"{path} was trained with the net {ref.class_path}, but net= names {named}; "
            f"name the class it was trained with"
        )
