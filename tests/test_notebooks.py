"""Every notebook in examples/ runs top to bottom in a real Jupyter kernel, with the settings it picks on a CPU.

The kernel gets the tests' small data sets (in the real on-disk formats) through
XLA_TRAIN_DATA_DIR, and torchvision's CIFAR-10 checksum check relaxed to "the
file exists", as fixture_cli.py does for the CLI: one cell put in front of the
notebook's own, which run unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import require  # noqa: E402
from helpers.warm_start import kernel_spec  # noqa: E402

nbformat = require("nbformat")
nbclient = require("nbclient")

from test_imdb import write_aclimdb  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
DATA = {
    "cifar10_cnn": "cifar",
    "cifar10_resnet": "cifar",
    "imdb_lstm": "imdb",
    "own_model": "cifar",
    "benchmarks": None,
}

PRELUDE = """\
import os
import torchvision.datasets.cifar as _cifar, torchvision.datasets.utils as _utils
_cifar.check_integrity = _utils.check_integrity = lambda fpath, md5=None: os.path.isfile(fpath)
{data}"""


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
    """A kernel forked from the suite's warm-start server, with torch and Lightning imported (tests/warm_kernel.py)."""
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return kernel_spec(tmp_path / "jupyter")


def test_each_tutorial_has_a_notebook_without_outputs():
    assert {p.stem for p in NOTEBOOKS} == set(DATA)
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        cells = [c for c in nb.cells if c.cell_type == "code"]
        assert "xla_train.devices()" in cells[0].source and "pip" in cells[0].source  # installs, detects the TPU
        assert all(not c.outputs and c.execution_count is None for c in cells), f"{path.name} has outputs"


@pytest.mark.notebook  # benchmarks.ipynb runs once, below, where one process holds the device (CI time)
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem != "benchmarks"], ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom_on_the_cpu(path, tmp_path, cifar_root, kernel):
    data = DATA[path.stem]
    root = cifar_root if data == "cifar" else write_aclimdb(tmp_path / "imdb") if data == "imdb" else None
    nb = nbformat.read(path, as_version=4)
    setting = f"os.environ['XLA_TRAIN_DATA_DIR'] = {str(root)!r}" if root else ""
    nb.cells.insert(0, nbformat.v4.new_code_cell(PRELUDE.format(data=setting)))
    work = tmp_path / "work"
    work.mkdir()
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name=kernel, resources={"metadata": {"path": str(work)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs) + "".join(
        o.get("data", {}).get("text/plain", "") for o in outputs if "data" in o
    )
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert "accelerator=cpu" in text  # the setup cell found no TPU and said what it will use
    assert images, "no chart was shown"
    assert list((work / "runs").glob("*/version_0/checkpoints/*.ckpt"))
    if path.stem == "imdb_lstm":
        assert text.count("p=") == 3  # a label and its probability for each typed sentence


@pytest.mark.notebook
def test_benchmarks_notebook_runs_where_one_process_holds_the_device(tmp_path, kernel):
    """As on a TPU, where libtpu lets one process hold the chips: XLA:CPU under the test mode that locks it
    (runtime/tpu_lock.py). The notebook asks for its devices in the kernel and then benchmarks XLA in cell
    processes; each of those must get the device, so the kernel must not be holding it. It runs top to bottom
    (SMALL: the emulated device is not a TPU) and shows the sweep's and the curves' charts."""
    from xla_train.runtime.tpu_lock import EMULATE_ENV

    path = EXAMPLES / "benchmarks.ipynb"
    nb = nbformat.read(path, as_version=4)
    lock = tmp_path / "libtpu_lockfile"
    nb.cells.insert(0, nbformat.v4.new_code_cell(PRELUDE.format(data=f"os.environ[{EMULATE_ENV!r}] = {str(lock)!r}")))
    nb.cells.append(nbformat.v4.new_code_cell("xla_train.devices('xla'), xla_train.devices()"))  # again, after
    work = tmp_path / "work"
    work.mkdir()
    nbclient.NotebookClient(nb, timeout=600, kernel_name=kernel, resources={"metadata": {"path": str(work)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs) + "".join(
        o.get("data", {}).get("text/plain", "") for o in outputs if "data" in o
    )
    assert "accelerator=xla" in text  # the setup cell took the emulated TPU for the device to use
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(list((work / "runs" / "bench").glob("version_*"))) == 2  # the sweep and the curves
    assert "XLA:CPU" in text and len(images) >= 2
    cells = sorted((work / "runs" / "bench").glob("version_*/cells/*.json"))
    results = {p.stem: p.read_text() for p in cells}
    xla = {k: v for k, v in results.items() if "xla" in k}
    assert xla and all('"error"' not in v for v in xla.values()), results  # every XLA cell got the device
