"""What the package owes Lightning, checked on its source and its classes: each hook it overrides marked and found in
a base class, each strategy one of Lightning's, and the LightningModule holding what the runtimes ask of it
(runtime/interface.py's StepModule), so that a misspelt hook or a missing member fails here, not by never running.
"""

import ast

from helpers.package_source import MODULES, PACKAGE, RUNTIME_FOLDERS

LIGHTNING_BASES = {
    "Callback",
    "LightningModule",
    "LightningDataModule",
    "LightningCLI",
    "CheckpointReadingCLI",
    "SingleDeviceXLAStrategy",
    "XLAStrategy",
    "ParallelStrategy",
    "SingleDeviceStrategy",
    "XLAAccelerator",
    "TorchCheckpointIO",
    "XLAPrecision",
}


# Not here: num_nodes and set_world_ranks, which Lightning's accelerator connector finds with hasattr on a
# strategy that has them; no base class defines them, so an @override there would be false.
LIGHTNING_HOOKS = {
    "setup",
    "teardown",
    "state_dict",
    "load_state_dict",
    "forward",
    "training_step",
    "validation_step",
    "test_step",
    "configure_optimizers",
    "on_save_checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "process_dataloader",
    "model_to_device",
    "reduce",
    "broadcast",
    "barrier",
    "reduce_boolean_decision",
    "instantiate_trainer",
    "add_arguments_to_parser",
    "auto_device_count",
    "is_available",
    "parse_devices",
    "get_parallel_devices",
    "name",
    "block_backward_sync",
    "is_global_zero",
    "distributed_sampler_kwargs",
    "train_step_context",
    "val_step_context",
    "test_step_context",
    "predict_step_context",
    "forward_context",
    "backward",
    "optimizer_step",
    "optimizer_state",
    "lightning_module_state_dict",
} | {
    f"on_{w}"
    for w in (
        "fit_start",
        "fit_end",
        "train_start",
        "train_end",
        "validation_start",
        "train_batch_start",
        "train_epoch_start",
        "train_epoch_end",
        "train_batch_end",
        "validation_epoch_start",
        "validation_epoch_end",
        "validation_batch_end",
        "test_epoch_start",
        "test_epoch_end",
        "test_batch_end",
        "predict_epoch_start",
        "predict_epoch_end",
        "predict_batch_end",
        "exception",
    )
}


def test_lightning_hook_overrides_are_marked():
    classes = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                classes[node.name] = (bases, node, path)

    def lightning(name, seen=()):
        bases = classes[name][0] if name in classes else set()
        return bool(bases & LIGHTNING_BASES) or any(lightning(b, seen + (name,)) for b in bases - set(seen))

    missing = []
    for name, (_, node, path) in classes.items():
        if not lightning(name):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in LIGHTNING_HOOKS:
                marks = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in item.decorator_list}
                if "override" not in marks:
                    missing.append(f"{path.relative_to(PACKAGE.parent)}:{item.lineno} {name}.{item.name}")
    assert not missing, "\n".join(missing)


def package_classes() -> set[type]:
    """Every class the package defines, its modules imported."""
    import importlib
    import inspect

    names = [n for n in MODULES if not n.endswith("__main__")]  # __main__ runs the command line
    return {
        cls
        for name in names
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass)
        if cls.__module__.startswith("xla_train")
    }


def test_every_override_names_a_method_of_a_base_class():
    """At run time, on every class the package defines: a method marked @override must exist in a class after it
    in the MRO of each concrete class that uses it (a mixin's overrides are checked where it is mixed in), so a
    misspelt hook fails here instead of never being called."""
    ours = package_classes()
    leaves = {cls for cls in ours if not any(c is not cls and cls in c.__mro__ for c in ours)}
    wrong, checked = [], 0
    for leaf in leaves:
        mro = leaf.__mro__
        for i, cls in enumerate(mro):
            for attr, value in vars(cls).items():
                if getattr(value, "__override__", False) or getattr(
                    getattr(value, "fget", None), "__override__", False
                ):
                    checked += 1
                    if not any(attr in vars(base) for base in mro[i + 1 :]):
                        wrong.append(f"{cls.__module__}.{cls.__qualname__}.{attr} (in {leaf.__qualname__})")
    assert checked > 50 and not wrong, "\n".join(sorted(set(wrong)))


def lightning_strategies_inherited(cls: type) -> list[type]:
    """The Lightning strategies whose code `cls` inherits: those of Lightning in its MRO that no other one there
    derives from (SingleDeviceXLAStrategy, not also the SingleDeviceStrategy and Strategy under it)."""
    lightning = [c for c in cls.__mro__ if c.__module__.startswith("lightning.") and "Strategy" in c.__name__]
    return [c for c in lightning if not any(d is not c and c in d.__mro__ for d in lightning)]


def test_each_strategy_inherits_one_lightning_strategy():
    """A strategy holds its engine and is one of Lightning's strategies (docs/layout.md): two of them inherited
    leaves one's collectives answering for the other's world, stubbed where they disagree."""
    from lightning.pytorch.strategies import Strategy

    strategies = [cls for cls in package_classes() if Strategy in cls.__mro__]
    assert len(strategies) >= 4, strategies  # single-device, SPMD and xla_mp on torch_xla, JAX's
    wrong = {cls.__qualname__: lightning_strategies_inherited(cls) for cls in strategies}
    wrong = {name: [c.__name__ for c in found] for name, found in wrong.items() if len(found) != 1}
    assert not wrong, wrong


def test_the_one_strategy_check_finds_two():
    from lightning.pytorch.strategies import ParallelStrategy, SingleDeviceXLAStrategy

    from xla_train.runtime.hosts import ProgramHosts

    class Two(ProgramHosts, SingleDeviceXLAStrategy, ParallelStrategy):
        pass

    assert lightning_strategies_inherited(Two) == [SingleDeviceXLAStrategy, ParallelStrategy]


# --- what the runtimes need of the LightningModule (runtime/interface.py, StepModule) ------------------------------
# the names the engines, strategies and runtime callbacks give the LightningModule
MODULE_NAMES = {"module", "self.module", "self.lightning_module", "trainer.lightning_module", "pl_module"}


def protocol_members(proto) -> dict:
    """A Protocol's own members: its annotated attributes (None) and its methods."""
    import inspect

    members = dict.fromkeys(vars(proto).get("__annotations__", {}))
    members.update({n: v for n, v in vars(proto).items() if inspect.isfunction(v) and not n.startswith("_")})
    return members


def unmet_members(cls, instance, proto) -> list[str]:
    """The members of `proto` that `cls` lacks, or whose method cannot be called as the Protocol's is: with its
    required arguments alone, and with all of them."""
    import inspect

    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    wrong = []
    for name, method in protocol_members(proto).items():
        own = getattr(cls, name, None)
        if method is None:
            if not (hasattr(cls, name) or hasattr(instance, name)):
                wrong.append(f"{name}: {cls.__name__} has no such attribute")
            continue
        if not callable(own):
            wrong.append(f"{name}: {cls.__name__} has no such method")
            continue
        params = list(inspect.signature(method).parameters.values())[1:]
        for given in ([p for p in params if p.default is p.empty], params):
            args = [None] + [None for p in given if p.kind in positional]
            kwargs = {p.name: None for p in given if p.kind is inspect.Parameter.KEYWORD_ONLY}
            try:
                inspect.signature(own).bind(*args, **kwargs)
            except TypeError as e:
                wrong.append(f"{name}{inspect.signature(method)}: {cls.__name__}'s is {inspect.signature(own)} ({e})")
                break
    return wrong


def module_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) for each member asked of the LightningModule: module.name, getattr/hasattr(module, "name")."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in MODULE_NAMES:
            found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("getattr", "hasattr")
            and ast.unparse(node.args[0]) in MODULE_NAMES
            and isinstance(node.args[1], ast.Constant)
        ):
            found.append((node.lineno, node.args[1].value))
    return found


def test_the_lightning_module_has_what_the_runtimes_need():
    from torch import nn

    from xla_train.runtime.interface import StepModule
    from xla_train.training.module import Classifier

    assert len(protocol_members(StepModule)) > 10
    assert not unmet_members(Classifier, Classifier(nn.Linear(2, 2)), StepModule)


def test_the_runtimes_ask_the_lightning_module_only_what_step_module_names():
    """Every engine, strategy and runtime callback file: the shared grouped steps, and each runtime's folder."""
    from xla_train.runtime.interface import StepModule

    runtime = PACKAGE / "runtime"
    files = [runtime / "grouped_steps.py", *(p for f in RUNTIME_FOLDERS for p in sorted((runtime / f).glob("*.py")))]
    uses = [(path, line, name) for path in files for line, name in module_uses(ast.parse(path.read_text()))]
    assert len(uses) > 30, uses  # the engines' own: a scan that finds none checks nothing
    members = protocol_members(StepModule)
    wrong = [f"{p.relative_to(PACKAGE.parent)}:{n} asks for {name!r}" for p, n, name in uses if name not in members]
    assert not wrong, "\n".join(wrong)


def test_the_step_module_checks_find_each_form():
    from xla_train.runtime.interface import StepModule

    tree = ast.parse(
        'a = self.module.x\nb = module.y()\nc = getattr(trainer.lightning_module, "z", 0)\nd = pl_module.w\ne = o.v\n'
    )
    assert sorted(name for _, name in module_uses(tree)) == ["w", "x", "y", "z"]

    class Lacking:  # step_state without its stage; nothing else
        def step_state(self):
            return {}

    wrong = unmet_members(Lacking, Lacking(), StepModule)
    assert any(w.startswith("step_state(self, stage") for w in wrong), wrong
    assert any(w.startswith("reading:") for w in wrong) and any(w.startswith("trainer:") for w in wrong), wrong
