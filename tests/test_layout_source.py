"""What the source may reach and say: other packages' private names only in compat files, each such package capped
at the versions their headers audit; docstrings that say why in a few lines, leaving measurements and history to
docs/; and what a test runs in a fresh process kept in files ruff reads.
"""

import ast

from helpers.package_source import MODULES, PACKAGE, third_party


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
