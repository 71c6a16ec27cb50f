"""docs/results.md's tables are what tools/results.py writes from the CSVs in docs/results/: a figure edited by hand
on the page, or a CSV changed without the page, fails here."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_results_page_is_what_its_csvs_write():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "results.py"), "--check"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_generated_block_names_a_table_and_every_table_is_on_a_page():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import results
    finally:
        sys.path.remove(str(ROOT / "tools"))
    on_pages = [m.group(2) for page in results.PAGES for m in results.BLOCK.finditer(page.read_text())]
    assert sorted(on_pages) == sorted(results.TABLES), on_pages
    assert all(results.TABLES[name]().strip() for name in on_pages)


def test_command1_reads_the_readmes_command_and_the_lines_a_run_prints():
    """tools/command1.py runs what the README says (not a copy of it) and reads the figures from the run's own lines."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import command1
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert command1.readme_command().startswith("python3 -m venv .venv && ")
    assert command1.readme_command().endswith("-m xla_train recipe=quickstart")
    out = (
        "run folder: runs/quickstart/version_0  (accelerator xla, 1 device(s))\n"
        "compiled graphs by phase: train 1 (5.5 s), validate 1 (0.9 s)\n"
        "held-out test accuracy: 0.9750 (best checkpoint runs/quickstart/version_0/checkpoints/best-epoch=3.ckpt)\n"
        "  true 7  predicted 7  p=1.000\n  true 6  predicted 5  p=0.600\n"
        "time: start-up 9.7 s, compile 6.3 s, train 12.7 s, validate 0.5 s, test 0.4 s (wall 29.6 s)\n"
    )
    assert (
        command1.own_lines("Collecting torch\nSuccessfully installed torch-2.9.0\n" + out) == out
    )  # pip's lines left out
    assert command1.figures(out) == {
        "wall_s": "29.6",
        "startup_s": "9.7",
        "compile_s": "6.3",
        "train_s": "12.7",
        "validate_s": "0.5",
        "test_s": "0.4",
        "held_out_acc": "0.9750",
        "predictions_right": "1",
        "predictions": "2",
        "plan": "accelerator xla, 1 device(s)",
        "compiled": "train 1 (5.5 s), validate 1 (0.9 s)",
    }


def test_flops_counts_a_training_steps_matmuls_and_convolutions():
    """tools/flops.py, the count behind results.md's TPU estimate: linear in the batch for the CNN (cifar10 at 128,
    the quickstart at 32: the same net), and for the LSTM the recurrent matmuls of every time step, forward and
    backward (3 x 2 x maxlen x batch x 4H x (E + H)), not just the head's."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import flops
    finally:
        sys.path.remove(str(ROOT / "tools"))
    counted = {name: flops.count(name) for name in ("quickstart", "cifar10", "imdb")}
    assert counted["cifar10"]["gflop_per_step"] == pytest.approx(4 * counted["quickstart"]["gflop_per_step"], rel=0.01)
    imdb = counted["imdb"]
    assert (imdb["batch"], imdb["input"]) == (128, "maxlen 500")
    assert imdb["gflop_per_step"] == pytest.approx(3 * 2 * 500 * 128 * (4 * 32) * (128 + 32) / 1e9, rel=0.05)


def test_the_prose_quotes_no_measured_figure_that_its_tables_lack():
    """A figure typed into the prose goes stale when its CSV is measured again; the page's prose may say what a table
    shows, but a ratio (0.73x) or a decimal time or size it quotes must be one a generated block holds. A goal ("issue
    39's goal of 1.5 GB") is a setting, not a measurement."""
    import re

    page = (ROOT / "docs" / "results.md").read_text()
    block = re.compile(r"<!-- results: [\w-]+ -->.*?<!-- /results -->", re.S)
    tables = " ".join(block.findall(page))
    prose = block.sub("", page)
    figure = re.compile(r"\b\d+\.\d\d+x\b|\b\d[\d,]*\.\d+ ?(?:ms|s|MiB|MB|GB)\b")
    typed = [
        m.group(0)
        for m in figure.finditer(prose)
        if m.group(0) not in tables and "goal" not in prose[max(0, m.start() - 40) : m.start()]
    ]
    assert not typed, f"docs/results.md's prose quotes figures no generated block holds: {typed}"


def test_every_file_of_evidence_is_cited_by_the_results_page():
    """A CSV no page cites is a measurement nobody can find: superseded runs are deleted (git keeps them)."""
    page = (ROOT / "docs" / "results.md").read_text()
    uncited = [p.name for p in sorted((ROOT / "docs" / "results").iterdir()) if f"(results/{p.name})" not in page]
    assert not uncited, f"docs/results/ holds files docs/results.md does not cite: {uncited}"


def test_kernel_profile_sums_each_kernel_a_step_and_a_call_leaving_out_the_spans_that_hold_others():
    """tools/kernel_profile.py's table of a trace: a While's time holds its body's kernels and is kept as the loop's;
    the thunk executor's and torch_xla's call spans hold other kernels, so they are no kernels of their own; a
    kernel run once a step reads the same a call whether or not the trace caught every step."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import kernel_profile
    finally:
        sys.path.remove(str(ROOT / "tools"))
    ms = 1_000_000
    events = [
        ("ThunkExecutor::Execute", 0, 100 * ms),
        ("call.15", 5 * ms, 6 * ms),
        ("wrapped_scatter.clone", 5 * ms, 6 * ms),
    ]
    for step in range(2):  # two steps: a loop of three iterations, then the scatter
        begin = 10 * ms + step * 40 * ms
        events += [("while.16", begin, 30 * ms)] + [("dot.31", begin + i * 10 * ms, 9 * ms) for i in range(3)]
    events.append(("wrapped_scatter", 75 * ms, 4 * ms))  # the first step's scatter fell before the trace began
    rows = {r["kernel"]: r for r in kernel_profile.kernels(events, steps=2)}
    assert set(rows) == {"wrapped_scatter.clone", "while.16", "dot.31", "wrapped_scatter"}
    assert (rows["while.16"]["calls_per_step"], rows["while.16"]["ms_per_step"]) == (1, 30)
    assert (rows["dot.31"]["calls_per_step"], rows["dot.31"]["ms_per_call"], rows["dot.31"]["ms_per_step"]) == (
        3,
        9,
        27,
    )
    assert (rows["wrapped_scatter"]["ms_per_call"], rows["wrapped_scatter"]["ms_per_step"]) == (4, 2)
    assert rows["wrapped_scatter.clone"]["first_ms"] == 0 and rows["while.16"]["first_ms"] == 5
    assert list(rows) == ["while.16", "dot.31", "wrapped_scatter.clone", "wrapped_scatter"]  # longest first


def test_import_floor_reads_a_steps_peak_and_the_peak_its_exit_adds():
    """tools/import_floor.py's figures are the child's own: a step that holds 200 MiB peaks above it, and memory
    touched only as the process exits (as PyPI torch's CUDA libraries touch theirs) is in the peak it reports, as in
    /usr/bin/time's, and not in the peak before the exit."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import import_floor
    finally:
        sys.path.remove(str(ROOT / "tools"))
    held = import_floor.measure("x = bytearray(200 << 20)\nx[::4096] = b'1' * len(x[::4096])\n")
    assert held["peak_mib"] >= 200 and held["exit_peak_mib"] >= 200
    at_exit = "import atexit\ndef touch():\n    y = bytearray(300 << 20)\n    y[::4096] = b'1' * len(y[::4096])\n"
    exiting = import_floor.measure(at_exit + "atexit.register(touch)\n")
    assert exiting["peak_mib"] < 100 <= 300 <= exiting["exit_peak_mib"]
