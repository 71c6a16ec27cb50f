"""Where benchmark numbers go, and the evidence that travels with them.

A figure without its hardware, package versions, date and command cannot be
checked or compared, so every table and chart written here carries them: the
CSV as leading `#` lines (pandas: `read_csv(path, comment="#")`), the Markdown
as a header list, each PNG as a footer. Results land in a fresh run folder
(runs/bench/version_N), never over an earlier one.
"""

from __future__ import annotations

import csv
import datetime
import os
import platform
import re
import shlex
from pathlib import Path


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_vector_units(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The x86 vector and matrix units a CPU figure depends on ("" where /proc/cpuinfo names none): a VM's model name
    often hides them, and XLA:CPU and the eager fast path both run differently with and without AVX-512 and bf16."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return ""
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    if not flags:
        return ""
    if "avx512f" not in flags:
        return "no AVX-512"
    bf16 = [name for flag, name in (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX-BF16")) if flag in flags]
    return ", ".join(["AVX-512", *bf16]) if bf16 else "AVX-512, no bf16"


def cpu_summary() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    units = cpu_vector_units()
    return f"{cpu_model()}{f' ({units})' if units else ''}, {usable} usable core(s) of {os.cpu_count()}"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("torch", "torch_xla", "lightning"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} (not installed)")
    for pkg in ("jax", "torchax"):  # runtime=jax's, where installed
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out) + f", Python {platform.python_version()}"


# The environment that changes what a run compiles, on how many threads and devices, or how its heap behaves: set
# in the shell, it is part of the command that reproduces the figures. Read as the command starts (cli/bench.py),
# before importing torch_xla adds its own XLA_FLAGS.
SETTINGS = (
    "XLA_FLAGS",
    "LIBTPU_INIT_ARGS",
    "PJRT_DEVICE",
    "CPU_NUM_DEVICES",
    "OMP_NUM_THREADS",
    "GLIBC_TUNABLES",
)


def settings_prefix() -> str:
    """`NAME=value ` for each of SETTINGS (and glibc's MALLOC_ variables) that this process's environment sets."""
    names = [n for n in SETTINGS if n in os.environ] + sorted(n for n in os.environ if n.startswith("MALLOC_"))
    return "".join(f"{n}={shlex.quote(os.environ[n])} " for n in names)


def peer_invocation(script: str, argv: list[str]) -> str:
    """A peer script's command as run (bench/peers/), its shell settings first; read before torch_xla is imported."""
    return settings_prefix() + shlex.join(["python", f"xla_train/bench/peers/{Path(script).name}", *argv])


def peer_args(argv: list[str]) -> tuple[Path | None, list[str]]:
    """A peer script's `--csv FILE` (None without it), and its other arguments."""
    if "--csv" not in argv:
        return None, list(argv)
    at = argv.index("--csv")
    return Path(argv[at + 1]), argv[:at] + argv[at + 2 :]


def provenance(command: str, accelerators: list[str] | None = None) -> dict[str, str]:
    """hardware / versions / date / command, as they are printed, tabled and charted."""
    hardware = f"host CPU: {cpu_summary()}"
    if accelerators:
        hardware += "; measured on: " + "; ".join(accelerators)
    return {
        "hardware": hardware,
        "versions": versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
    }


def new_run_dir(runs_dir: str, name: str = "bench") -> Path:
    """runs_dir/name/version_N, claimed exclusively (training/run_folder.py): two runs never share one."""
    from xla_train.training.run_folder import claim_folder

    return claim_folder(Path(runs_dir) / name)


def write_csv(path: Path, rows: list[dict], columns: list[str], prov: dict[str, str]) -> None:
    with open(path, "w", newline="") as f:
        for key, value in prov.items():
            f.write(f"# {key}: {value}\n")
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({c: fmt_csv(row.get(c)) for c in columns})


def fmt_csv(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def fmt(v, digits: int = 1) -> str:
    """A table cell: blanks for nothing, thousands separators for big numbers."""
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def markdown(title: str, prov: dict[str, str], headers: list[str], rows: list[list], notes: list[str] = ()) -> str:
    lines = [f"# {title}", ""] + [f"- {k}: {v}" for k, v in prov.items() if k != "command"]
    lines += [f"- command: `{prov['command']}`", *(f"- {n}" for n in notes), ""]
    lines.append("| " + " | ".join(headers) + " |")
    numeric = [all(re.fullmatch(r"-|-?[\d,]*\.?\d+", str(row[i])) for row in rows) for i in range(len(headers))]
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def text_table(headers: list[str], rows: list[list]) -> str:
    """The same table for a terminal."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    out = ["  ".join(str(h).rjust(w) for h, w in zip(headers, widths))]
    out += ["  ".join(str(c).rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(out)


def publish(
    run_dir: Path,
    name: str,
    title: str,
    prov: dict[str, str],
    rows: list[dict],
    columns: list[str],
    headers: list[str],
    table: list[list],
    notes: list[str],
    charts: list[Path] = (),
    caption: str = "",
) -> None:
    """The end of every bench: NAME.csv (every figure, headed by its evidence), NAME.md (the table, its notes and
    charts) and, on the terminal, the evidence, the notes, the table and where the files are."""
    write_csv(run_dir / f"{name}.csv", rows, columns, prov)
    md = markdown(title, prov, headers, table, notes)
    (run_dir / f"{name}.md").write_text(md + "".join(f"\n![{p.stem}]({p.name})\n" for p in charts))
    print(f"\n{prov['hardware']}\n{prov['versions']}; {prov['date']}")
    for n in notes:
        print(f"- {n}")
    if caption:
        print(caption)
    print(text_table(headers, table))
    print(f"results: {run_dir} ({', '.join([f'{name}.csv', f'{name}.md', *(p.name for p in charts)])})")


def figure(title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.2))
    ax.set_title(title, fontsize=11)
    return fig, ax


def save_figure(fig, path: Path, prov: dict[str, str]) -> None:
    import matplotlib.pyplot as plt

    footer = f"{prov['hardware']}\n{prov['versions']}; {prov['date']}"
    fig.text(0.01, 0.01, footer, fontsize=6.5, color="0.35", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    # The same evidence as PNG text chunks, for tools that read them.
    fig.savefig(
        path,
        dpi=120,
        metadata={
            "Title": fig.axes[0].get_title(),
            "Software": "xla_train bench",
            "Description": f"{prov['hardware']}; {prov['versions']}; {prov['date']}",
            "Comment": prov["command"],
        },
    )
    plt.close(fig)
