"""Runs the README's command 1 as a new user runs it and writes docs/results/command1.csv, so that the figures the
README and results.md give for it are the ones this run printed, with the machine, the versions, the commit and the
date beside them.

As a new user: the command is read from README.md's quick start (not restated here), run by bash in a fresh clone
of this checkout's HEAD, with nothing in the environment but HOME, PATH and LANG (`env -i`), so it installs what
pip installs (from this machine's pip cache, where it has one) and XLA runs with its defaults. GNU time gives the
peak memory of the job's largest process (the training run), the clock the whole job's time, install included; the
run's own lines give the rest, and what xla_train printed (pip's lines before it left out) goes beside the CSV
(command1.out), from which the README shows what a user sees. A failed run writes nothing.

    python tools/command1.py docs/results/command1.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from suite_times import cpu_name  # tools/, beside this file

ROOT = Path(__file__).resolve().parents[1]
FIELDS = [
    "commit",
    "job_s",
    "wall_s",
    "startup_s",
    "compile_s",
    "train_s",
    "validate_s",
    "test_s",
    "held_out_acc",
    "predictions_right",
    "predictions",
    "peak_mib",
    "plan",
    "compiled",
]


def readme_command() -> str:
    """The line after README.md's `# 1.` comment in its quick start."""
    lines = (ROOT / "README.md").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("# 1. "))
    return lines[at + 1].strip()


def figures(out: str) -> dict[str, str]:
    """The run's own lines, read as a user reads them: the time line, the held-out accuracy, the predictions."""
    time_line = re.search(r"^time: (.*)$", out, re.M).group(1)
    parts = dict(re.findall(r"([a-z-]+) ([\d.]+) s", time_line))
    predictions = re.findall(r"true (\d+)  predicted (\d+)", out)
    return {
        "wall_s": parts["wall"],
        **{
            f"{k.replace('start-up', 'startup')}_s": parts[k]
            for k in ("start-up", "compile", "train", "validate", "test")
        },
        "held_out_acc": re.search(r"held-out test accuracy: ([\d.]+)", out).group(1),
        "predictions_right": str(sum(t == p for t, p in predictions)),
        "predictions": str(len(predictions)),
        "plan": re.search(r"^run folder: \S+\s+\((.*)\)$", out, re.M).group(1),
        "compiled": re.search(r"^compiled graphs by phase: (.*)$", out, re.M).group(1),
    }


def own_lines(out: str) -> str:
    """What xla_train printed: the job's output from its first line on, without pip's before it."""
    return out[out.index("run folder: ") :]


def versions(python: Path) -> str:
    code = (
        "import importlib.metadata as m, platform\n"
        "print(', '.join(f'{n} {m.version(n)}' for n in ('torch', 'torch_xla', 'lightning')) + "
        "f', Python {platform.python_version()}')"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the CSV to write (docs/results/command1.csv)")
    args = parser.parse_args(argv)
    command = readme_command()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="command1_") as tmp:
        clone = Path(tmp) / "xla_train"
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        started = datetime.now(timezone.utc)
        env = ["env", "-i", f"HOME={Path.home()}", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]
        t0 = time.perf_counter()
        proc = subprocess.run(
            [*env, "/usr/bin/time", "-f", "%M KB", "bash", "-c", command],
            cwd=clone,
            capture_output=True,
            text=True,
        )
        job_s = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n", file=sys.stderr)
            print(f"command 1 failed ({proc.returncode}); nothing written", file=sys.stderr)
            return 1
        row = {"commit": commit.stdout.strip(), "job_s": f"{job_s:.1f}", **figures(proc.stdout)}
        peak_kb = int(re.findall(r"^(\d+) KB$", proc.stderr, re.M)[-1])
        row["peak_mib"] = f"{peak_kb / 1024:.0f}"
        found = versions(clone / ".venv" / "bin" / "python")
    printed = Path(args.out).with_suffix(".out")
    Path(f"{printed}.partial").write_text(own_lines(proc.stdout))
    partial = Path(f"{args.out}.partial")
    with open(partial, "w", newline="") as f:
        f.write(f"# hardware: {cpu_name()}, {os.cpu_count()} core(s)\n# versions: {found}\n")
        f.write(f'# date: {started:%Y-%m-%d %H:%M} UTC\n# command: env -i HOME PATH LANG bash -c "{command}"\n')
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerow(row)
    partial.replace(args.out)
    Path(f"{printed}.partial").replace(printed)
    print(f"wrote {args.out}: {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
