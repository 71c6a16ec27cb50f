"""The tutorials' charts, drawn from benchmark rows: epoch time by accelerator, by batch size, and accuracy per epoch.

Matplotlib with the Agg backend (files only, no display). Every chart carries
the hardware, versions and date in its footer (report.save_figure), and a cell
that failed is left out rather than drawn as zero.
"""

from __future__ import annotations

from pathlib import Path

from xla_train.bench import report


COLORS = {"cpu": "tab:gray", "gpu": "tab:green", "tpu": "tab:blue", "xla": "tab:orange"}


def _label(row: dict) -> str:
    return f"{row['accelerator']}: {row.get('device') or '?'}"


def _plain_numbers(axis, minor: bool = False) -> None:
    """Plain numbers on a log axis; with minor=True the minor ticks are labelled too, since a range
    inside one decade (from 2 to 5, say) has no major tick to label."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:.2g}")
    axis.set_major_formatter(plain)
    axis.set_minor_formatter(plain if minor else NullFormatter())


def pick_chart_batch(rows: list[dict], wanted: int | None) -> int | None:
    """The batch for the by-accelerator chart: the one asked for, else 32 (the tutorials'), else the smallest."""
    batches = sorted({r["batch"] for r in rows if r.get("epoch_s") is not None})
    if not batches:
        return None
    if wanted in batches:
        return wanted
    return 32 if 32 in batches else batches[0]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("charts skipped: matplotlib is not installed (pip install 'xla_train[bench]'); the tables are complete")
        return False
    return True


def sweep_charts(run_dir: Path, rows: list[dict], prov: dict, recipe: str, chart_batch: int | None) -> list[Path]:
    made = []
    batch = pick_chart_batch(rows, chart_batch)
    if batch is None or not have_matplotlib():
        return made
    at = [r for r in rows if r["batch"] == batch and r.get("epoch_s") is not None]
    fig, ax = report.figure(f"{recipe}: projected epoch time by accelerator, batch {batch} per device")
    bars = ax.bar(range(len(at)), [r["epoch_s"] for r in at], color=[COLORS[r["accelerator"]] for r in at])
    ax.set_xticks(range(len(at)), [_label(r) for r in at], fontsize=8)
    ax.bar_label(bars, labels=[f"{r['epoch_s']:,.1f} s" for r in at], fontsize=8)
    ax.set_ylabel(f"seconds per epoch ({at[0]['train_size']:,} samples)")
    path = run_dir / "epoch_time_by_accelerator.png"
    report.save_figure(fig, path, prov)
    made.append(path)

    fig, ax = report.figure(f"{recipe}: projected epoch time by batch size")
    for accelerator in dict.fromkeys(r["accelerator"] for r in rows):
        pts = sorted(
            (r["global_batch"], r["epoch_s"], _label(r))
            for r in rows
            if r["accelerator"] == accelerator and r.get("epoch_s") is not None
        )
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=pts[0][2], color=COLORS[accelerator])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted({r["global_batch"] for r in rows if r.get("epoch_s") is not None}))
    _plain_numbers(ax.xaxis)
    _plain_numbers(ax.yaxis, minor=True)
    ax.set_xlabel("global batch size")
    ax.set_ylabel("seconds per epoch (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = run_dir / "epoch_time_by_batch.png"
    report.save_figure(fig, path, prov)
    made.append(path)
    return made


def curves_chart(run_dir: Path, rows: list[dict], prov: dict, title: str) -> list[Path]:
    """Validation accuracy per epoch, one line per batch size."""
    if not have_matplotlib():
        return []
    fig, ax = report.figure(title)
    for batch in sorted({r["batch"] for r in rows}):
        pts = sorted(
            (r["epoch"] + 1, r["val_acc"]) for r in rows if r["batch"] == batch and r.get("val_acc") is not None
        )
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"batch {batch}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    path = run_dir / "val_acc_by_epoch.png"
    report.save_figure(fig, path, prov)
    return [path]
