"""Where a training step's time goes, kernel by kernel, on each runtime (tools/kernel_profile.py's CSV)."""

from __future__ import annotations

from result_tables.csvs import block, read

LONGEST = 6  # the kernels run once a step that the table names


def _once_a_step(row: dict) -> bool:
    return 0.9 <= float(row["calls_per_step"]) <= 1.1


def kernels_imdb() -> str:
    """The IMDB LSTM's step on each runtime: its two scans' loops (a While's time holds its body's kernels) and the
    longest kernels run once a step outside them, by their ms a call, then all of those summed."""
    rows = read("kernels-imdb.csv")[1]
    runtimes = ("torch_xla", "jax")
    loops, once = {}, {}
    for runtime in runtimes:
        mine = [r for r in rows if r["runtime"] == runtime and _once_a_step(r)]
        whiles = sorted((r for r in mine if r["kernel"].startswith("while")), key=lambda r: -float(r["ms_per_call"]))
        loops[runtime] = sorted(whiles[:2], key=lambda r: float(r["first_ms"]))  # the forward scan runs first
        once[runtime] = sorted(
            (r for r in mine if not r["kernel"].startswith("while")), key=lambda r: -float(r["ms_per_call"])
        )
    out = [
        "| | torch_xla kernel | ms a call | jax kernel | ms a call |",
        "|---|---|---:|---|---:|",
    ]

    def cells(r: dict | None) -> str:
        return f"`{r['kernel']}` | {float(r['ms_per_call']):.1f}" if r else " | "

    for i, what in enumerate(("the forward scan's loop", "the backward scan's loop")):
        out.append(f"| {what} | {' | '.join(cells(loops[rt][i]) for rt in runtimes)} |")
    for i in range(LONGEST):
        what = "the longest kernel run once a step" if i == 0 else f"the next ({i + 1})"
        out.append(f"| {what} | {' | '.join(cells(once[rt][i] if i < len(once[rt]) else None) for rt in runtimes)} |")
    sums = " | ".join(f" | **{sum(float(r['ms_per_call']) for r in once[rt]):.1f}**" for rt in runtimes)
    out.append(
        f"| every kernel run once a step outside the loops, summed (some run side by side on the two cores) | {sums} |"
    )
    return block(out, "kernels-imdb.csv")
