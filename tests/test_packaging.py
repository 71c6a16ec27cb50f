"""xla_train installed as Colab and Kaggle install it: a wheel, not a checkout, run from a folder with no recipes/.

The wheel is built from this repository and installed by the notebooks' own install cell into a fresh virtual
environment that sees the test environment's packages (torch, lightning, ...) but not its editable xla_train.
"""

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from helpers import new_user_env

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "examples").glob("*.ipynb"))
INSTALL_END = "check=True)\n"  # the install cell's pip line ends the part every notebook shares


def install_block(notebook: Path) -> str:
    source = "".join(next(c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code")["source"])
    return source[: source.index(INSTALL_END) + len(INSTALL_END)]


def test_the_wheel_lists_every_package_folder_and_carries_the_recipes():
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {"xla_train"} | {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "xla_train").rglob("*/__init__.py")
    }
    assert set(tool["packages"]) == on_disk | {"xla_train.recipes"}
    assert tool["package-dir"] == {"xla_train.recipes": "recipes"} and list((REPO / "recipes").glob("*.yaml"))


def torch_allowed(*extras: str) -> dict:
    """{name: the versions `pip install '.[extras]'` may take} for torch, torchvision and torch-xla: the base
    requirement narrowed by every one the extras add (None: nothing asks for it)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]
    allowed = {}
    for r in map(Requirement, listed):
        if r.name in ("torch", "torchvision", "torch-xla"):
            allowed[r.name] = allowed.get(r.name, SpecifierSet()) & r.specifier
    return allowed


def test_jax_takes_any_torch_torchax_runs_on_and_torch_xla_keeps_the_torch_it_was_built_for():
    """torchax 0.0.13 imports on torch 2.9-2.12 and fails on 2.13 (google/torchax#101); torch-xla 2.9.0 runs on
    2.9.0 only; torchvision 0.24-0.27 each require one torch release of 2.9-2.12, so its range follows torch's."""
    for extra in ("jax", "jax-tpu", "jax-cuda"):
        allowed = torch_allowed(extra)
        assert "torch-xla" not in allowed, extra  # its wheel carries an old torchax/ over torchax's own files
        torch, vision = allowed["torch"], allowed["torchvision"]
        assert all(torch.contains(v) for v in ("2.9.0", "2.10.0", "2.11.0", "2.12.0", "2.12.1")), (extra, torch)
        assert not torch.contains("2.13.0") and not torch.contains("2.8.0"), (extra, torch)
        for minor in range(9, 14):  # torchvision 0.(minor + 15) is torch 2.minor's
            assert vision.contains(f"0.{minor + 15}.0") == torch.contains(f"2.{minor}.0"), (extra, vision, torch)
    for extras in (("torch-xla",), ("tpu",), ("test",), ("jax", "torch-xla")):
        allowed = torch_allowed(*extras)
        assert [v for v in ("2.9.0", "2.9.1", "2.10.0", "2.12.1") if allowed["torch"].contains(v)] == ["2.9.0"], extras
        assert [v for v in ("0.24.0", "0.24.1", "0.27.1") if allowed["torchvision"].contains(v)] == ["0.24.0"], extras
        assert allowed["torch-xla"].contains("2.9.0"), extras


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")  # built apart, so the build writes nothing into the checkout
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src)
    for folder in ("xla_train", "recipes"):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    return next(dist.glob("xla_train-*.whl"))


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip())
    # the suite's packages on the path; a path a .pth file adds has its own .pth files (the editable hook) unread
    (site / "suite_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_every_notebook_installs_the_same_way():
    assert len(NOTEBOOKS) == 5 and len({install_block(nb) for nb in NOTEBOOKS}) == 1


def test_the_install_cell_says_how_to_set_the_source_when_it_is_unset(fresh_python, tmp_path):
    proc = subprocess.run(
        [fresh_python, "-c", install_block(NOTEBOOKS[0])],
        env=new_user_env(KAGGLE_KERNEL_RUN_TYPE="Batch"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stderr.startswith("XLA_TRAIN_SOURCE is not set: set it to"), proc.stderr
    assert "pip wheel --no-deps" in proc.stderr and "%env XLA_TRAIN_SOURCE=" in proc.stderr


def test_the_notebooks_install_line_gives_an_xla_train_that_runs_a_recipe_from_any_folder(
    wheel, fresh_python, tmp_path
):
    """As on Kaggle: the notebook's cell installs the wheel (its dependencies are the suite's: no index here), then
    the quickstart runs, on its default accelerator, from a folder that has no recipes/."""
    installed = subprocess.run(
        [fresh_python, "-c", install_block(NOTEBOOKS[0]) + "import xla_train; print(xla_train.__file__)"],
        env=new_user_env(
            KAGGLE_KERNEL_RUN_TYPE="Batch", XLA_TRAIN_SOURCE=str(wheel), PIP_NO_DEPS="1", PIP_NO_INDEX="1"
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert Path(installed.stdout.split()[-1]).is_relative_to(fresh_python.parents[1])  # the wheel's, not the checkout's
    work = tmp_path / "elsewhere"
    work.mkdir()
    fit = subprocess.run(
        [fresh_python, "-m", "xla_train", "recipe=quickstart", "epochs=1", "trainer.limit_train_batches=4"]
        + ["trainer.limit_val_batches=2", "predict_samples=2"],
        env=new_user_env(),
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fit.returncode == 0, fit.stdout[-3000:] + fit.stderr[-3000:]
    assert "run folder: runs/quickstart/version_0  (accelerator xla, 1 device(s))" in fit.stdout
    assert "held-out test accuracy:" in fit.stdout and fit.stdout.count("  true ") == 2
    assert not (work / "recipes").exists() and (work / "runs/quickstart/version_0/config.yaml").is_file()
