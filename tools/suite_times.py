"""Writes docs/results/test-suite.csv from the JUnit files of default-suite runs taken back to back on one machine
(`pytest -n 2 --dist loadscope --junitxml=FILE`), so that results.md's figure for the suite is the one pytest
recorded, with the machine, the versions and the date beside it.

Each run is a row of its wall time and of its tests' summed times (worker-seconds), and each test file a row of
its worker-seconds, so a change to how the suite starts its processes shows where it saved.

    python tools/suite_times.py docs/results/test-suite.csv warm=/tmp/warm.xml cold=/tmp/cold.xml \\
        --command "XLA_TRAIN_TESTS_WARM=0|1 pytest -q -n 2 --dist loadscope"
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def read_run(path: str) -> tuple[dict, Counter]:
    """(the suite's totals, worker-seconds by test file) of one JUnit file."""
    suite = ET.parse(path).getroot().find("testsuite")
    by_file: Counter = Counter()
    for case in suite.iter("testcase"):
        by_file[case.get("classname").removeprefix("tests.") + ".py"] += float(case.get("time"))
    totals = {
        "tests": int(suite.get("tests")),
        "failures": int(suite.get("failures")) + int(suite.get("errors")),
        "wall_s": round(float(suite.get("time")), 1),
        "worker_s": round(sum(by_file.values()), 1),
        "started": suite.get("timestamp")[:16].replace("T", " ") + " UTC",
    }
    return totals, by_file


def cpu_name() -> str:
    """The CPU's model name, and whether it has AVX-512 (the VMs here differ in it, and in speed)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), None)
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    return f"{name or platform.processor() or 'unknown CPU'} {'with' if 'avx512f' in flags else 'without'} AVX-512"


def versions() -> str:
    found = []
    for name in ("torch", "torch_xla", "lightning", "jax", "torchax", "pytest-xdist"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found + [f"Python {platform.python_version()}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the CSV to write (docs/results/test-suite.csv)")
    parser.add_argument(
        "runs",
        nargs="+",
        help="NAME=JUNIT.xml, one per run; the first is compared with the others and lists its slowest files",
    )
    parser.add_argument("--command", required=True, help="the command that ran them")
    parser.add_argument("--files", type=int, default=8, help="the test files to list, by worker-seconds")
    args = parser.parse_args(argv)
    runs = {}
    for given in args.runs:
        name, _, path = given.partition("=")
        if not path or not Path(path).is_file():
            parser.error(f"{given!r} is not NAME=JUNIT.xml naming a file")
        runs[name] = read_run(path)
    first = next(iter(runs.values()))[1]
    files = [f for f, _ in first.most_common(args.files)]
    rows = []
    for name, (totals, by_file) in runs.items():
        rows.append({"run": name, "file": "(all)", **totals})
        rows += [{"run": name, "file": f, "worker_s": round(by_file[f], 1)} for f in files]
    fields = ["run", "file", "tests", "failures", "wall_s", "worker_s", "started"]
    with open(args.out, "w", newline="") as out:
        out.write(f"# hardware: {cpu_name()}, {os.cpu_count()} core(s)\n# versions: {versions()}\n")
        out.write(f"# date: {next(iter(runs.values()))[0]['started']}\n# command: {args.command}\n")
        writer = csv.DictWriter(out, fields)
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
