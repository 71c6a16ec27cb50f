"""docs/results.md's tables are what tools/results.py writes from the CSVs in docs/results/: a figure edited by hand
on the page, or a CSV changed without the page, fails here."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_results_page_is_what_its_csvs_write():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "results.py"), "--check"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_generated_block_names_a_table_and_every_table_is_on_the_page():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import results
    finally:
        sys.path.remove(str(ROOT / "tools"))
    on_page = [m.group(2) for m in results.BLOCK.finditer(results.PAGE.read_text())]
    assert sorted(on_page) == sorted(results.TABLES), on_page
    assert all(results.TABLES[name]().strip() for name in on_page)
