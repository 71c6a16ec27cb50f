"""Tables of XLA:CPU's own settings: compiler flags, the C heap's page faults and huge pages. XLA:CPU is the
stand-in here, so these say what the stand-in costs, not what a TPU does."""

from __future__ import annotations

import statistics

import re

from result_tables.claims import Claim, f, x
from result_tables.csvs import CSVS, block, mb, ms, read


def xla_flags() -> str:
    """XLA:CPU's compiler flags against its defaults: one bench run each, in its own process, the flag in its command."""
    out = [
        "| `XLA_FLAGS` | quickstart compile s | quickstart step ms | IMDB compile s | IMDB step ms |",
        "|---|---:|---:|---:|---:|",
    ]
    names, found, notes = [], {}, [""]
    for case in ("none", "o1", "o0", "noexp"):
        cells = []
        for recipe in ("quickstart", "imdb"):
            name = f"xla-flags-{recipe}-{case}.csv"
            if not (CSVS / name).exists():
                cells += ["", ""]
                continue
            names.append(name)
            about, (r,) = read(name)
            flags = re.match(r"XLA_FLAGS=(\S+) ", about["command"])
            found[case, recipe] = float(r["compile_s"]), float(r["step_ms"])
            cells += [f"{float(r['compile_s']):.1f}", f"{float(r['step_ms']):,.1f}"]
        label = f"`{flags.group(1)}`" if flags else "none (the default)"
        out.append(f"| {label} | " + " | ".join(cells) + " |")
        if case != "none":
            (compile_s, step), (base_compile, base_step) = found[case, "quickstart"], found["none", "quickstart"]
            line = f"- {label}: the quickstart compiles in {compile_s / base_compile:.2f}x the default's time, at "
            line += f"{step / base_step:.2f}x its step"
            if (case, "imdb") in found:
                line += f"; the IMDB LSTM's step takes {found[case, 'imdb'][1] / found['none', 'imdb'][1]:.1f}x as long"
            notes.append(line + ".")
    return block(out + notes, *names)


JAX_LEVEL = [("resnet", "ResNet-20", (1,))]


def jax_level() -> str:
    """A convolution net's JAX programs at XLA's backend level 2 against its default 3, alternating bench runs."""
    out = [
        "| net, batch, K | round | compile s, level 3 / 2 | first step s, level 3 / 2 | step ms, level 3 / 2 "
        "| level 2 against 3: compile | level 2 against 3: step |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = []
    for net, what, rounds in JAX_LEVEL:
        for rnd in rounds:
            three, two = (read(f"jax-level-{net}-{level}-{rnd}.csv")[1][0] for level in (3, 2))
            names += [f"jax-level-{net}-{level}-{rnd}.csv" for level in (3, 2)]
            k = f"{three['steps_per_execution_used']}, {three['execution_loop_used']}"
            out.append(
                f"| {what}, {three['batch']}, {k} | {rnd} | {float(three['compile_s']):.1f} / "
                f"{float(two['compile_s']):.1f} | {float(three['first_step_s']):.1f} / {float(two['first_step_s']):.1f} "
                f"| {ms(three['step_ms'])} / {ms(two['step_ms'])} | "
                f"{x(f(two['compile_s']), f(three['compile_s']))} | {x(f(two['step_ms']), f(three['step_ms']))} |"
            )
    return block(out, *names)


def jax_compile() -> str:
    """The IMDB LSTM on JAX before its step was traced as one program (1ac9701), after it at XLA's default level 3,
    and after it at level 2: alternating bench runs, two rounds."""
    sides = (
        ("before", "before: 1ac9701, level 3"),
        ("level3", "traced as one program, level 3"),
        ("now", "traced as one program, level 2 (now)"),
    )
    out = [
        "| round | code | compile s | first step s | step ms | host MB |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    names = []
    for rnd in (1, 2):
        for side, what in sides:
            name = f"jax-compile-{side}-{rnd}.csv"
            names.append(name)
            r = read(name)[1][0]
            out.append(
                f"| {rnd} | {what} | {float(r['compile_s']):.1f} | {float(r['first_step_s']):.1f} | {ms(r['step_ms'])} "
                f"| {mb(r['host_peak_mb'])} |"
            )
    return block(out, *names)


def page_faults() -> str:
    """Page faults per XLA:CPU execution under each C heap setting, alternating runs: xla_cpu_page_faults.py."""
    out = [
        "| C heap | K=1: faults per execution | K=1: step ms | K=4: faults per execution | K=4: step ms |",
        "|---|---:|---:|---:|---:|",
    ]
    names = []
    for case in ("defaults", "hugetlb", "nommap"):
        runs = sorted(p.name for p in CSVS.glob(f"page-faults-{case}-*.csv"))
        names += runs
        by_k = {}
        for name in runs:
            for r in read(name)[1]:
                by_k.setdefault(r["k"], []).append(r)
        heap = read(runs[0])[1][0]["heap"]
        label = heap if heap == "glibc defaults" else f"`{heap}`"
        cells = []
        for k in ("1", "4"):
            cells.append(" / ".join(f"{int(r['faults_per_execution']):,}" for r in by_k[k]))
            cells.append(" / ".join(f"{float(r['step_ms']):.1f}" for r in by_k[k]))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return block(out, *names)


def huge_pages() -> str:
    """Training steps with glibc advising transparent huge pages against its defaults, alternating bench runs."""
    out = [
        "| cell | round | step ms, defaults | step ms, huge pages | device ms, defaults / huge pages "
        "| compile s, defaults / huge pages | host peak MB, defaults / huge pages |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names, ratios = [], {}
    for recipe, what in (("imdb", "IMDB LSTM"), ("quickstart", "quickstart CNN")):
        for rnd in (1, 2):
            off, on = (read(f"hugepages-{recipe}-{side}-{rnd}.csv")[1][0] for side in ("off", "on"))
            names += [f"hugepages-{recipe}-{side}-{rnd}.csv" for side in ("off", "on")]
            ratios.setdefault(what, []).append(float(on["step_ms"]) / float(off["step_ms"]))
            out.append(
                f"| {what}, batch {off['batch']}, K={off['steps_per_execution_used']} | {rnd} | {ms(off['step_ms'])} | "
                f"{ms(on['step_ms'])} | {ms(off['device_ms_per_step'])} / {ms(on['device_ms_per_step'])} | "
                f"{float(off['compile_s']):.1f} / {float(on['compile_s']):.1f} | "
                f"{mb(off['host_peak_mb'])} / {mb(on['host_peak_mb'])} |"
            )
    out.append("")
    out += [
        f"- {what}: the step with huge pages is {' and '.join(f'{r:.2f}x' for r in rs)} the defaults' in the two rounds."
        for what, rs in ratios.items()
    ]
    return block(out, *names)


def huge_pages_claim() -> Claim:
    parts = []
    for recipe, what in (("imdb", "IMDB LSTM"), ("quickstart", "quickstart CNN")):
        pairs = [[read(f"hugepages-{recipe}-{s}-{n}.csv")[1][0] for s in ("off", "on")] for n in (1, 2)]
        parts.append(f"{what} {' and '.join(x(f(on['step_ms']), f(off['step_ms'])) for off, on in pairs)}")
    faults = {
        case: statistics.median(
            f(r["faults_per_execution"])
            for n in (1, 2)
            for r in read(f"page-faults-{case}-{n}.csv")[1]
            if r["k"] == "1"
        )
        for case in ("defaults", "hugetlb")
    }
    return Claim(
        "glibc's transparent huge pages on XLA:CPU (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1` in the user's shell)",
        f"the training step {'; '.join(parts)} the defaults' (two rounds); page faults per quickstart execution "
        f"{faults['defaults']:,.0f} against {faults['hugetlb']:,.0f}",
        tuple(f"hugepages-{r}-{s}-{n}.csv" for r in ("imdb", "quickstart") for s in ("off", "on") for n in (1, 2))
        + tuple(f"page-faults-{case}-{n}.csv" for case in ("defaults", "hugetlb") for n in (1, 2)),
        "xlacpus-fresh-pages-per-execution",
    )
