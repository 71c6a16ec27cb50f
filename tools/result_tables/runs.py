"""Tables of whole runs: README command 1, the test suite, and learning curves by batch size."""

from __future__ import annotations

import re

from result_tables.claims import Claim, f, x
from result_tables.csvs import CSVS, block, mb, read, source


def command1() -> str:
    """README command 1 as a new user runs it: tools/command1.py."""
    (r,) = read("command1.csv")[1]
    parts = ", ".join(f"{k} {r[f'{k}_s']} s" for k in ("startup", "compile", "train", "validate", "test"))
    rows = [
        ("the run, by its time line", f"**{r['wall_s']} s** ({parts})"),
        ("the whole job, pip's install (from this machine's cache) included", f"{float(r['job_s']):.0f} s"),
        ("held-out accuracy of the best checkpoint", f"{float(r['held_out_acc']):.2%}"),
        ("CPU predictions right", f"{r['predictions_right']} of {r['predictions']}"),
        ("peak memory (the training process)", f"{mb(r['peak_mib'])} MiB"),
        ("what the defaults chose", r["plan"]),
        ("compiled graphs by phase", r["compiled"]),
        ("commit", r["commit"]),
    ]
    return "| | |\n|---|---|\n" + "".join(f"| {a} | {b} |\n" for a, b in rows) + "\n" + source("command1.csv")


def suite() -> str:
    """The default suite's runs back to back on one machine, from pytest's JUnit files: tools/suite_times.py."""
    rows = read("test-suite.csv")[1]
    runs = [r["run"] for r in rows if r["file"] == "(all)"]
    at = {(r["run"], r["file"]): r for r in rows}
    ratio = len(runs) == 2

    def line(label: str, key: str, file: str) -> str:
        cells = [float(at[run, file][key]) for run in runs]
        shown = " | ".join(f"{c:,.0f}" for c in cells)
        if not ratio:
            return f"| {label} | {shown} |"
        return f"| {label} | {shown} | " + (
            f"**{cells[0] / cells[1]:.2f}x** |" if cells[1] >= 1 else "not in that run |"
        )

    out = [
        "| | " + " | ".join(f"{run} s" for run in runs) + " |" + (f" {runs[0]} / {runs[1]} |" if ratio else ""),
        "|---|" + "---:|" * (len(runs) + ratio),
        line(
            f"wall ({at[runs[0], '(all)']['tests']} tests, {at[runs[0], '(all)']['failures']} failed)",
            "wall_s",
            "(all)",
        ),
        line("worker-seconds, all tests", "worker_s", "(all)"),
    ]
    out += [line(f"`{r['file']}`", "worker_s", r["file"]) for r in rows if r["run"] == runs[0] and r["file"] != "(all)"]
    return block(out, "test-suite.csv")


def batch_curves() -> str:
    """Validation accuracy by epoch at three batch sizes, real digits, the recipe's learning rate: bench curves."""
    name = "curves-quickstart.csv"
    rows = read(name)[1]
    batches = sorted({int(r["batch"]) for r in rows})
    acc = {(int(r["batch"]), int(r["epoch"])): float(r["val_acc"]) for r in rows}
    out = ["| epoch | " + " | ".join(f"batch {b}" for b in batches) + " |", "|---:|" + "---:|" * len(batches)]
    for e in sorted({int(r["epoch"]) for r in rows}):
        out.append(f"| {e + 1} | " + " | ".join(f"{acc[b, e]:.3f}" for b in batches) + " |")
    train_s = {b: sum(float(r["train_seconds"]) for r in rows if int(r["batch"]) == b) for b in batches}
    out.append("| training s, all epochs | " + " | ".join(f"{train_s[b]:.1f}" for b in batches) + " |")
    return block(out, name)


def ci_runs() -> str:
    """`.ci/run` on CI's own machine, as its stop records report it, beside the same commit's run on this VM."""
    name = "ci-runs.csv"
    out = ["| commit | CI's machine s | this VM s (when) | CI / this VM |", "|---|---:|---:|---:|"]
    for r in read(name)[1]:
        ci, local = float(r["ci_s"]), float(r["local_s"])
        out.append(
            f"| {r['commit']} | {ci:,.0f} ({ci / 60:.1f} min) | {local:,.0f} ({r['local_when']}) | {ci / local:.2f}x |"
        )
    return block(out, name)


def command1_output() -> str:
    """What README command 1 printed in tools/command1.py's run (command1.out), trimmed to the lines a user reads first,
    with that run's date and machine: the README's example cannot drift from its performance table."""
    about, _ = read("command1.csv")
    lines = (CSVS / "command1.out").read_text().splitlines()

    def first(prefix: str, after: int = 0) -> int:
        return next(i for i, line in enumerate(lines) if i >= after and line.startswith(prefix))

    epoch = first("Epoch 2/")
    shown = [lines[first("run folder:")], lines[first("runtime:")], "...", lines[epoch], lines[epoch + 1], "..."]
    shown += [lines[first("compiled graphs by phase:")], lines[first("held-out test accuracy:")]]
    shown += [lines[first("  true ")], lines[first("time: ")]]
    cpu = re.match(r"(.+?), (\d+) core", about["hardware"])
    return (
        f"On a {cpu.group(2)}-core VM ({cpu.group(1)}) on {about['date'][:10]}, trimmed (the figures: "
        "[Performance](#performance)):\n\n```\n" + "\n".join(shown) + "\n```\n"
    )


def command1_claim() -> Claim:
    (r,) = read("command1.csv")[1]
    return Claim(
        "README command 1, the run alone",
        f"{r['wall_s']} s by its time line (start-up {r['startup_s']} s, compile {r['compile_s']} s); "
        f"{f(r['held_out_acc']):.2%} held out, {r['predictions_right']} of {r['predictions']} CPU predictions right; "
        f"peak {f(r['peak_mib']):,.0f} MiB",
        ("command1.csv",),
        "the-quickstart-as-a-new-user-runs-it",
        short=f"{r['wall_s']} s, {f(r['held_out_acc']):.1%} held out, peak {f(r['peak_mib']):,.0f} MiB",
    )


def batch_curves_claim() -> Claim:
    rows = read("curves-quickstart.csv")[1]
    batches = sorted({int(r["batch"]) for r in rows})
    last = max(int(r["epoch"]) for r in rows)
    acc = {(int(r["batch"]), int(r["epoch"])): f(r["val_acc"]) for r in rows}

    def at(epoch: int) -> str:
        return " / ".join(f"{acc[b, epoch]:.3f}" for b in batches)

    return Claim(
        "batch size and convergence, quickstart, the recipe's learning rate",
        f"validation accuracy after epoch 1: {at(0)}, after epoch {last + 1}: {at(last)} at batch "
        f"{' / '.join(map(str, batches))}",
        ("curves-quickstart.csv",),
        "batch-size-and-convergence",
    )


def suite_claim() -> Claim:
    rows = {r["run"]: r for r in read("test-suite.csv")[1] if r["file"] == "(all)"}
    now, before = rows["now"], rows["before"]
    ci = read("ci-runs.csv")[1][-1]
    return Claim(
        "`.ci/run` (install, lint, the default suite on two workers) on a fresh clone",
        f"on CI's machine {f(ci['ci_s']) / 60:.1f} min at {ci['commit']} ({f(ci['ci_s']) / f(ci['local_s']):.2f}x this "
        f"VM's time); the suite alone here {f(now['wall_s']):,.0f} s against {f(before['wall_s']):,.0f} s before its "
        f"last speed-up ({x(f(now['wall_s']), f(before['wall_s']))}), {now['tests']} tests",
        ("ci-runs.csv", "test-suite.csv"),
        "the-test-suite",
    )


def import_floor() -> str:
    """What a process holds before it trains: tools/import_floor.py, each step a fresh process."""
    rows = read("import-floor.csv")[1]
    out = [
        "| step (each adds to the one above) | peak MiB, its exit included | peak before its exit | anonymous / file "
        "MiB at its end | also loaded |",
        "|---|---:|---:|---:|---|",
    ]
    seen: set[str] = set()
    for step in dict.fromkeys(r["step"] for r in rows):
        mine = [r for r in rows if r["step"] == step]
        loaded = set(mine[0]["loaded"].split())
        new, seen = sorted(loaded - seen), seen | loaded if step != rows[0]["step"] else seen
        peak, before = (" / ".join(mb(r[key]) for r in mine) for key in ("peak_mib", "peak_before_exit_mib"))
        out.append(
            f"| {step} | {peak} | {before} | {mb(mine[0]['anon_mib'])} / {mb(mine[0]['file_mib'])} | {', '.join(new)} |"
        )
    return block(out, "import-floor.csv")
