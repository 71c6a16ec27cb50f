"""xla_train's modules and what each imports, read from the source without importing it: the package's structure
as tests/test_layout*.py check it. Every import is counted, including those deferred into functions, so a cycle
cannot hide behind a late import."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "xla_train"
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
# a wrong path would find no module, and every check over MODULES would pass having checked nothing
assert "xla_train.runtime.registry" in MODULES and len(MODULES) > 100, f"no xla_train package at {PACKAGE}"


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


def third_party(name: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


# runtime/'s sibling folders, one per runtime (docs/layout.md, "Adding a runtime")
RUNTIME_FOLDERS = ("torch_xla", "jax", "eager")
