"""The architecture, checked from the source: one room per stage, arrows down the story, internals fenced off.

Every import is counted, including those deferred into functions, so a cycle
cannot hide behind a late import.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xla_train"
PEERS = PACKAGE / "bench" / "peers"  # the peers' scripts: run in their own environments, never imported


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if PEERS in path.parents:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = modules()


def absolute(name: str, node: ast.ImportFrom) -> str:
    """The module a `from ... import` names, relative imports resolved against `name`'s package."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if MODULES[name].name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name: str) -> set[str]:
    """xla_train modules that `name` imports anywhere in its body, relative imports too (a package import counts
    as its __init__; `import a.b._c` as a.b._c)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = absolute(name, node)
            submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES]
            targets = submodules or [module]  # `from pkg import module` runs module, not only pkg/__init__
        found |= {t for t in targets if t in MODULES and t != name}
    return found


def reachable(name: str) -> set[str]:
    """Every xla_train module that importing `name` can import, through any chain (modules of no room too:
    checkpoint, objective, compat, errors)."""
    seen, todo = set(), [name]
    while todo:
        for n in GRAPH[todo.pop()] - seen:
            seen.add(n)
            todo.append(n)
    return seen - {name}


def third_party(name: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


GRAPH = {m: imports(m) for m in MODULES}


def test_no_import_cycles_counting_deferred_imports():
    state, cycles = {}, []

    def visit(m, path):
        state[m] = "open"
        for n in sorted(GRAPH[m]):
            if state.get(n) == "open":
                cycles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in MODULES:
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_at_most_eight_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


@pytest.mark.parametrize(
    "rooms, forbidden",
    [
        (("models", "data", "preprocess"), ("runtime", "training", "config", "cli", "serve", "bench", "api", "run")),
        (("training",), ("config", "cli", "serve", "bench", "api", "run")),
        (("runtime",), ("training", "config", "cli", "serve", "bench", "api", "run", "data", "models")),
        (("serve",), ("data", "training", "runtime", "config", "cli", "bench")),
        (("config", "serve", "bench", "training", "runtime", "data", "models", "preprocess"), ("cli", "api", "run")),
    ],
)
def test_arrows_point_down_the_story(rooms, forbidden):
    """Checked through every chain of imports: models -> checkpoint -> runtime breaks the rule as surely as
    models -> runtime does."""
    wrong = [
        (m, n)
        for m in MODULES
        for n in reachable(m)
        if m.split(".")[1:2] and m.split(".")[1] in rooms and n.split(".")[1:2] and n.split(".")[1] in forbidden
    ]
    assert not wrong, wrong


def test_the_import_graph_sees_relative_and_private_imports(tmp_path, monkeypatch):
    """The checks above rest on imports(): it must see the forms of import a change could slip in."""
    fake = tmp_path / "xla_train" / "models"
    fake.mkdir(parents=True)
    (fake / "probe.py").write_text(
        "from ..runtime.torch_xla import spmd\nfrom . import cnn\nimport xla_train.runtime._x\n"
        "def f():\n    from ..checkpoint import to_cpu\n"
    )
    monkeypatch.setitem(MODULES, "xla_train.models.probe", fake / "probe.py")
    monkeypatch.setitem(MODULES, "xla_train.runtime._x", fake / "probe.py")
    assert imports("xla_train.models.probe") == {
        "xla_train.runtime.torch_xla.spmd",
        "xla_train.models.cnn",
        "xla_train.runtime._x",
        "xla_train.checkpoint",
    }


@pytest.mark.parametrize(
    "room_name, packages",
    [
        ("models", {"lightning", "torch_xla"}),
        ("preprocess", {"lightning", "torch_xla"}),
        ("serve", {"lightning", "torch_xla"}),
        ("data", {"torch_xla"}),
        ("training", {"torch_xla"}),
    ],
)
def test_rooms_that_must_not_know_a_framework(room_name, packages):
    wrong = {m: third_party(m) & packages for m in MODULES if m.startswith(f"xla_train.{room_name}")}
    assert not any(wrong.values()), wrong


DEVICE_KINDS = {"xla", "tpu", "gpu", "cuda", "cpu"}


def device_questions(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each place that asks a device its kind: torch.cuda, a comparison with a `.type` or with a
    device or accelerator kind's name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "cuda" and getattr(node.value, "id", None) == "torch":
            found.append((node.lineno, "torch.cuda"))
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                parts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                for part in parts:
                    if isinstance(part, ast.Attribute) and part.attr == "type":
                        found.append((node.lineno, ".type compared"))
                    if isinstance(part, ast.Constant) and part.value in DEVICE_KINDS:
                        found.append((node.lineno, f"compared with {part.value!r}"))
    return found


def test_only_runtime_asks_a_device_its_kind():
    """A Backend (runtime/backend.py) answers what the rest of the code would ask a device's type: a new backend
    is then one class, not a hunt through every room."""
    findings = []
    for name, path in MODULES.items():
        if name.startswith(("xla_train.runtime", "xla_train.compat")):
            continue
        findings += [
            f"{path.relative_to(PACKAGE.parent)}:{line} {what}"
            for line, what in device_questions(ast.parse(path.read_text()))
        ]
    assert not findings, findings


# Modules outside cli/ that touch sys.argv, and why: neither parses a user's command line.
ARGV_TOUCHERS = {
    "xla_train.config.lightning_cli": "hides sys.argv from Lightning's warning while it parses the given args",
    "xla_train.bench.timing": "a benchmark cell's own process reads the spec its parent wrote",
}


def test_only_cli_reads_the_command_line():
    """Every command's argv is parsed in cli/ (one file per command); other rooms take typed values."""
    found = []
    for name, path in MODULES.items():
        if name.startswith("xla_train.cli") or name == "xla_train.__main__" or name in ARGV_TOUCHERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "argv" and getattr(node.value, "id", None) == "sys":
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_command"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not found, found


def test_the_device_question_check_finds_each_form():
    tree = ast.parse('if torch.cuda.is_available(): pass\nx = d.type == "xla"\ny = a in ("cpu", "gpu")\n')
    assert sorted(w for _, w in device_questions(tree)) == sorted(
        [
            "torch.cuda",
            ".type compared",
            "compared with 'xla'",
            "compared with 'cpu'",
            "compared with 'gpu'",
        ]
    )


def framework_private_names() -> set[str]:
    """Private names the frameworks' classes define (what a subclass or a caller could reach into), and the
    private modules and functions xla_train is known to need."""
    import lightning.pytorch as pl
    import torch
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.strategies import ParallelStrategy, SingleDeviceXLAStrategy, XLAStrategy

    roots = [
        pl.LightningModule,
        pl.LightningDataModule,
        pl.Callback,
        pl.Trainer,
        LightningCLI,
        ParallelStrategy,
        SingleDeviceXLAStrategy,
        XLAStrategy,
        TorchCheckpointIO,
        torch.nn.LSTM,
        torch.utils.data.DataLoader,
    ]
    names = {
        n for root in roots for cls in root.__mro__ for n in vars(cls) if n.startswith("_") and not n.startswith("__")
    }
    return names | {
        "_getframe",
        "_actions",
        "_typehint",
        "_check_integrity",
        "_loader",
        "_internal",
        "_BatchNorm",
        "_signal_connector",
        "_XLAC",
        "_opt_called",
    }


def test_private_apis_of_other_packages_are_touched_only_in_compat():
    """Reaching a framework's private name (an attribute, an import, or overriding its private method) outside
    compat.py is a finding."""
    private = framework_private_names()
    findings = []
    for name, path in MODULES.items():
        if name.rsplit(".", 1)[-1] == "compat":  # compat.py, and each runtime's own (runtime/jax/compat.py)
            continue
        where = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in private:
                findings.append(f"{where}:{node.lineno} .{node.attr}")
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and any(part.startswith("_") and not part.startswith("__") for part in node.module.split("."))
                | any(a.name.startswith("_") for a in node.names)
            ):
                findings.append(f"{where}:{node.lineno} from {node.module}")
            if isinstance(node, ast.FunctionDef) and node.name in private:
                findings.append(f"{where}:{node.lineno} def {node.name}")
    assert not findings, "\n".join(findings)


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


def code_lines(path: Path) -> int:
    return sum(1 for ln in path.read_text().splitlines() if ln.strip())


def test_the_peers_scripts_live_with_the_benchmarks_and_nothing_imports_them():
    """One home for benchmarks: bench/ holds the bench command and, in bench/peers/, the peer scripts (Keras 3 on
    JAX, a bare LitServe server, XLA:CPU's page faults), which import what xla_train does not (keras, jax) and run in
    their own environments: scripts, not a package, so nothing imports them and no wheel ships them."""
    import tomllib

    assert sorted(p.name for p in PEERS.glob("*.py")), "bench/peers/ holds no script"
    assert not (PEERS / "__init__.py").exists()
    assert not (PACKAGE.parent / "benchmarks").exists(), "a second home for benchmarks"
    assert not [m for m in MODULES for n in imports(m) if n.startswith("xla_train.bench.peers")]
    packages = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert not [p for p in packages if "peers" in p]


def test_scripts_that_tests_run_are_files_ruff_reads():
    """What a test runs in a fresh process is a file of tests/scripts/, or the test itself under fresh_xla: a
    module-level string of Python in a test file is code that ruff never reads."""
    import re

    found = []
    for path in sorted((PACKAGE.parent / "tests").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.count("\n") >= 5:
                if re.search(r"^\s*(import|from) \w", value.value, re.M):
                    found.append(f"{path.name}:{node.lineno}")
    assert not found, f"Python in strings (move it to tests/scripts/): {found}"
    assert sorted(p.name for p in (PACKAGE.parent / "tests" / "scripts").glob("*.py"))


def test_benchmarks_are_at_most_a_quarter_of_the_package():
    total = sum(code_lines(p) for p in MODULES.values())
    bench = sum(code_lines(p) for m, p in MODULES.items() if m.startswith("xla_train.bench"))
    assert bench <= 0.25 * total, f"bench/ is {bench} of {total} lines ({bench / total:.0%})"


def audited_versions() -> dict[str, tuple[str, str]]:
    """{distribution: (first, last)} releases that compat.py's header says its private-API uses were read in: one
    version ("lightning 2.6.6") or a range whose every minor release was read ("torch 2.9.0-2.12.1")."""
    import re

    header = ast.get_docstring(ast.parse(MODULES["xla_train.compat"].read_text()))
    line = next(ln for ln in header.splitlines() if re.match(r"\s*lightning \d", ln))
    found = re.findall(r"([\w-]+) (\d[\w.]*)(?:-(\d[\w.]*))?", line)
    return {name.replace("_", "-"): (first, last or first) for name, first, last in found}


def test_every_dependency_whose_private_api_is_touched_has_an_upper_bound():
    """compat.py reaches behind these packages' public APIs, so a new release may break it silently; every
    requirement naming one (the base and each extra) must be capped in pyproject.toml below the minor release after
    the last one audited, and together they must admit the audited ends, until compat.py is audited again."""
    import tomllib

    from packaging.requirements import Requirement

    audited = audited_versions()
    import sys

    touched = {
        m.replace("_", "-")
        for m in third_party("xla_train.compat")
        if m not in sys.stdlib_module_names and m not in ("__future__", "xla_train", "typing_extensions")
    }
    assert touched <= set(audited), f"compat.py imports {touched - set(audited)} but its header audits none"
    assert {"lightning", "torch-xla", "torch", "jsonargparse"} <= set(audited), audited
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    # a runtime's package lives in its extra (each runtime installs on its own), and an extra may narrow the base
    listed = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    for name, (first, last) in audited.items():
        specs = [r.specifier for r in map(Requirement, listed) if r.name == name]
        assert specs, f"compat.py's header audits {name}, which pyproject.toml does not list"
        for spec in specs:
            assert any(s.operator in ("==", "===", "<", "<=", "~=") for s in spec), f"{name}{spec}: no upper bound"
            assert not spec.contains(_next_major_or_minor(last)), f"{name}{spec} admits the unaudited next release"
        for end in (first, last):
            assert any(spec.contains(end) for spec in specs), f"{name} {specs} excludes the audited {end}"


def _next_major_or_minor(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}.0"


def test_module_docstrings_say_why_in_a_few_lines_and_leave_history_to_the_docs():
    """Measurements and project history live in docs/; a module says why it is built as it is, and points there."""
    import re

    long, history = [], []
    for name, path in MODULES.items():
        source = path.read_text()
        doc = ast.get_docstring(ast.parse(source), clean=False) or ""
        if doc.count("\n") + 1 > 12:  # cli/bench.py's is 12: its usage block is `bench --help`
            long.append(f"{name}: {doc.count(chr(10)) + 1} lines")
        history += [f"{name}: {m.group()!r}" for m in re.finditer(r"\b[Ii]ssue \d+|\bissue's\b", source)]
    assert not long, long
    assert not history, history


# A figure with a unit of time or memory: "9 ns", "2.0-2.3 s", "1,349 MiB", "34 against 17 ms".
MEASURED = r"\b\d[\d,.]*\s?(?:ns|us|µs|ms|s|seconds?|minutes?|min|hours?|KB|KiB|MB|MiB|GB|GiB)\b"


def test_docstrings_hold_no_measurements():
    """A docstring says why; how fast or how large goes stale with the next commit or machine, and lives in
    docs/results.md with its command, hardware and date."""
    import re

    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                found += [f"{name}:{getattr(node, 'lineno', 1)}: {m.group()!r}" for m in re.finditer(MEASURED, doc)]
    assert not found, found


# --- the runtimes as siblings (docs/layout.md, "Adding a runtime") -----------------------------------------------
RUNTIME_FOLDERS = ("torch_xla", "jax", "eager")
# runtime/'s top: the registry, and what reaches a runtime only through it
RUNTIME_TOP = {"xla_train.runtime.registry", "xla_train.runtime.plan", "xla_train.runtime.devices"}


def runtime_part(name: str) -> str | None:
    """A runtime module's place: a runtime folder's name, "top", "floor", or None outside runtime/."""
    parts = name.split(".")
    if parts[:2] != ["xla_train", "runtime"]:
        return None
    if len(parts) > 2 and parts[2] in RUNTIME_FOLDERS:
        return parts[2]
    return "top" if name in RUNTIME_TOP else "floor"


def runtime_arrows_back_up(graph: dict) -> list[str]:
    """Imports that break runtime/'s order: the floor imports neither a runtime folder nor the top; a folder imports
    no sibling and not the top; the top reaches a folder only through the registry, by name."""
    wrong = []
    for m, targets in graph.items():
        here = runtime_part(m)
        for n in targets:
            there = runtime_part(n)
            if here is None or there is None or there == here:
                continue
            if here == "floor" and there != "floor":
                wrong.append(f"{m} -> {n} (the shared floor imports no runtime folder and not the top)")
            elif here in RUNTIME_FOLDERS and there != "floor":
                wrong.append(f"{m} -> {n} (a runtime folder imports only the floor)")
            elif here == "top" and there in RUNTIME_FOLDERS:
                wrong.append(f"{m} -> {n} (the top reaches a runtime through the registry)")
    return wrong


def test_runtimes_are_siblings_on_a_shared_floor():
    assert set(RUNTIME_FOLDERS) <= {p.name for p in (PACKAGE / "runtime").iterdir() if p.is_dir()}
    for folder in ("torch_xla", "jax"):  # the same file names for the same jobs
        files = {p.stem for p in (PACKAGE / "runtime" / folder).glob("*.py")}
        assert {"plan", "backend", "devices", "strategy", "engine", "compat"} <= files, (folder, files)
    eager = {p.stem for p in (PACKAGE / "runtime" / "eager").glob("*.py")}
    assert {"plan", "backend", "devices", "strategy"} <= eager, eager
    assert not runtime_arrows_back_up(GRAPH), "\n".join(runtime_arrows_back_up(GRAPH))


def test_the_sibling_check_finds_an_arrow_back_up():
    planted = {
        "xla_train.runtime.grouped_steps": {"xla_train.runtime.torch_xla.engine"},
        "xla_train.runtime.jax.engine": {"xla_train.runtime.torch_xla.compat", "xla_train.runtime.grouping"},
        "xla_train.runtime.torch_xla.plan": {"xla_train.runtime.registry"},
        "xla_train.runtime.plan": {"xla_train.runtime.eager.plan", "xla_train.runtime.registry"},
    }
    assert len(runtime_arrows_back_up(planted)) == 4, runtime_arrows_back_up(planted)


# each runtime's packages, imported only inside its own folder (and by bench/peers/' scripts, which run alone)
RUNTIME_PACKAGES = {"torch_xla": {"torch_xla"}, "jax": {"jax", "jaxlib", "torchax"}}


def test_each_runtime_is_imported_only_in_its_own_folder():
    wrong = [
        f"{m} imports {pkg}"
        for m in MODULES
        for folder, packages in RUNTIME_PACKAGES.items()
        for pkg in sorted(third_party(m) & packages)
        if runtime_part(m) != folder
    ]
    assert not wrong, wrong


RUNTIME_NAMES = {"torch_xla", "jax", "eager"}
OTHER_PLATFORM_SPELLINGS = {"CPU", "TPU", "GPU", "cuda"}  # the one spelling is runtime/probe.py's PLATFORMS


def name_comparisons(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) for each comparison with a runtime's name or a platform's other spelling (a module looked up in
    sys.modules is a package, not a runtime's name)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = (node.left, *node.comparators)
        if any(isinstance(s, ast.Attribute) and s.attr == "modules" for s in sides):
            continue
        for side in sides:
            parts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            found += [
                (node.lineno, p.value)
                for p in parts
                if isinstance(p, ast.Constant) and p.value in RUNTIME_NAMES | OTHER_PLATFORM_SPELLINGS
            ]
    return found


def test_runtime_names_are_compared_only_in_the_registry():
    """Everything downstream holds the registry's Runtime, not its name, and a platform has one spelling."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line} compares {value!r}"
        for name, path in MODULES.items()
        if name != "xla_train.runtime.registry"
        for line, value in name_comparisons(ast.parse(path.read_text()))
    ]
    assert not found, "\n".join(found)


def test_the_name_check_finds_each_form():
    tree = ast.parse('a = r == "jax"\nb = x in ("torch_xla", "y")\nc = p.upper() == "TPU"\nd = "jax" in sys.modules\n')
    assert sorted(v for _, v in name_comparisons(tree)) == ["TPU", "jax", "torch_xla"]


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
