"""The architecture, checked from the source: one room per stage, arrows down the story, internals fenced off.
What the source may reach and say is test_layout_source.py's, and what it owes Lightning test_layout_lightning.py's.
"""

import ast
from pathlib import Path

import pytest
from helpers.package_source import MODULES, PACKAGE, PEERS, RUNTIME_FOLDERS, imports, third_party


def reachable(name: str) -> set[str]:
    """Every xla_train module that importing `name` can import, through any chain (modules of no room too:
    checkpoint, objective, compat, errors)."""
    seen, todo = set(), [name]
    while todo:
        for n in GRAPH[todo.pop()] - seen:
            seen.add(n)
            todo.append(n)
    return seen - {name}


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
    "xla_train.bench.cell": "a benchmark cell's own process reads the spec its parent wrote",
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


def test_benchmarks_are_at_most_a_quarter_of_the_package():
    total = sum(code_lines(p) for p in MODULES.values())
    bench = sum(code_lines(p) for m, p in MODULES.items() if m.startswith("xla_train.bench"))
    assert bench <= 0.25 * total, f"bench/ is {bench} of {total} lines ({bench / total:.0%})"


# --- the runtimes as siblings (docs/layout.md, "Adding a runtime") -----------------------------------------------
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
