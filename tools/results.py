"""Writes the tables of docs/results.md from the CSVs in docs/results/, so that a figure on the page is the figure a
command wrote, with that command's provenance beside it.

A generated block sits between `<!-- results: NAME -->` and `<!-- /results -->`; everything else on the page is
prose and stays as written. Each NAME is a function below that reads its CSVs (a `bench` CSV, or a peer script's
summary) and returns Markdown. `python tools/results.py` rewrites the page; `--check` exits 1 when the committed
page differs from what it would write (tests/test_results_page.py runs that in CI).

    python tools/results.py            # rewrite docs/results.md's generated blocks
    python tools/results.py --check    # 0 when the page matches its CSVs, else 1 and the blocks that differ
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
CSVS = ROOT / "docs" / "results"
BLOCK = re.compile(r"(<!-- results: ([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)


def read(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """({provenance key: value} from the `# key: value` lines, rows) of docs/results/NAME."""
    lines = (CSVS / name).read_text().splitlines()
    about = {}
    for line in lines:
        if line.startswith("# ") and ": " in line:
            key, value = line[2:].split(": ", 1)
            about[key] = value
    return about, list(csv.DictReader(line for line in lines if not line.startswith("#")))


def source(*names: str) -> str:
    """The provenance lines under a table: each CSV's link, date, hardware, versions and command."""
    out = []
    for name in names:
        about, _ = read(name)
        out.append(
            f"From [{name}](results/{name}): {about.get('date', 'date not recorded')}; {about.get('hardware', '')}; "
            f"{about.get('versions', '')}; `{about.get('command', '')}`."
        )
    return "\n".join(out) + "\n"


def block(lines: list[str], *names: str) -> str:
    """A generated block: its table's lines, then the provenance of the CSVs they came from."""
    return "\n".join(lines) + "\n\n" + source(*names)


def ms(value: str) -> str:
    return f"{float(value):.1f}"


def mb(value: str) -> str:
    return f"{float(value):,.0f}"


def runtimes() -> str:
    """torch_xla against JAX, the same cells alternating in one run: bench runtimes=torch_xla,jax."""
    head = (
        "| cell | torch_xla step ms | jax step ms | jax samples/s against torch_xla's | compile s (torch_xla / jax) "
        "| host MB (torch_xla / jax) |\n|---|---|---|---|---|---|\n"
    )
    rows = []
    for name, cell in (
        ("runtimes-quickstart.csv", "quickstart CNN, batch 32, recipe defaults"),
        ("runtimes-imdb.csv", "IMDB LSTM, batch 128, maxlen 500, recipe defaults"),
    ):
        by = {r["runtime"]: r for r in read(name)[1]}
        t, j = by["torch_xla"], by["jax"]
        ratio = float(j["samples_per_s"]) / float(t["samples_per_s"])
        rows.append(
            f"| {cell} | {ms(t['step_ms'])} | {ms(j['step_ms'])} | **{ratio:.2f}x** | "
            f"{float(t['compile_s']):.1f} / {float(j['compile_s']):.1f} | {mb(t['host_peak_mb'])} / {mb(j['host_peak_mb'])} |"
        )
    lstm = read("runtimes-lstm-maxlen.csv")[1]
    maxlens = sorted({int(r["maxlen"]) for r in lstm})
    at = {(r["runtime"], int(r["maxlen"])): r for r in lstm}

    def per(runtime: str, key: str, fmt) -> str:
        return " / ".join(fmt(at[runtime, m][key]) for m in maxlens)

    ratios = " / ".join(
        f"{float(at['jax', m]['samples_per_s']) / float(at['torch_xla', m]['samples_per_s']):.2f}x" for m in maxlens
    )
    compiles = f"{per('torch_xla', 'compile_s', lambda v: f'{float(v):.1f}')} and {per('jax', 'compile_s', lambda v: f'{float(v):.1f}')}"
    rows.append(
        f"| IMDB LSTM, maxlen {' / '.join(map(str, maxlens))} (`bench lstm`) | {per('torch_xla', 'step_ms', ms)} | "
        f"{per('jax', 'step_ms', ms)} | {ratios} | {compiles} | |"
    )
    return (
        head
        + "\n".join(rows)
        + "\n\n"
        + source("runtimes-quickstart.csv", "runtimes-imdb.csv", "runtimes-lstm-maxlen.csv")
    )


def overhead() -> str:
    """Lightning's step traced anew against a hand-written torch_xla loop: bench overhead."""
    by = {r["side"]: r for r in read("overhead-quickstart.csv")[1]}
    p, x = by["plain"], by["xla_train"]
    return (
        "| side | steady step ms | host ms a step | host CPU ms a step |\n|---|---:|---:|---:|\n"
        f"| plain torch_xla loop | {ms(p['step_ms'])} | {float(p['host_ms_per_step']):.1f} | "
        f"{float(p['host_cpu_ms_per_step']):.1f} |\n"
        f"| xla_train (Lightning) | {ms(x['step_ms'])} | {float(x['host_ms_per_step']):.1f} | "
        f"{float(x['host_cpu_ms_per_step']):.1f} |\n"
        f"| xla_train / plain | **{float(x['ratio']):.3f}** | **{float(x['host_ratio']):.2f}** | "
        f"**{float(x['host_cpu_ratio']):.2f}** |\n\n" + source("overhead-quickstart.csv")
    )


def keras_steps() -> str:
    """xla_train's training step against Keras 3 on JAX, per round (keras_jax_peer.py and bench)."""
    rows = read("keras-peer-steps.csv")[1]
    at = {
        (r["model"], int(r["round"]), r["side"]): r
        for r in rows
        if r["side"] == "xla_train" or r["setting"] == "steps_per_execution=1"
    }
    out = [
        "| round | xla_train LSTM | Keras, tutorial's | Keras, matched | ratio, tutorial's | ratio, matched "
        "| xla_train CNN | Keras CNN | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rnd in sorted({int(r["round"]) for r in rows}):
        x, tut, mat = (at["imdb_lstm", rnd, s] for s in ("xla_train", "keras_tutorial", "keras_matched"))
        xc, kc = at["quickstart_cnn", rnd, "xla_train"], at["quickstart_cnn", rnd, "keras"]

        def ratio(ours, theirs):
            return f"**{float(ours['samples_per_s']) / float(theirs['samples_per_s']):.2f}x**"

        out.append(
            f"| {rnd} | {ms(x['step_ms'])} | {ms(tut['step_ms'])} | {ms(mat['step_ms'])} | {ratio(x, tut)} | "
            f"{ratio(x, mat)} | {ms(xc['step_ms'])} | {ms(kc['step_ms'])} | {ratio(xc, kc)} |"
        )
    return block(out, "keras-peer-steps.csv")


def keras_job() -> str:
    """README command 1's whole job on both sides, each a fresh process: keras_jax_peer.py --job quickstart."""
    rows = read("keras-peer-job.csv")[1]
    out = ["| side | wall s, by round | peak MiB | held out |", "|---|---:|---:|---:|"]
    for side in ("keras", "xla_train", "keras floor", "xla_train floor"):
        mine = [r for r in rows if r["side"] == side]
        accs = [f"{float(r['held_out_acc']):.2%}" for r in mine if r["held_out_acc"]]
        out.append(
            f"| {side} | {' / '.join(r['wall_s'] for r in mine)} | {' / '.join(mb(r['peak_mib']) for r in mine)} | "
            f"{' / '.join(accs)} |"
        )
    return block(out, "keras-peer-job.csv")


def gpu() -> str:
    """JAX's XLA on a GPU beside plain PyTorch on the same GPU, one bench run per recipe: tools/gpu_bench.sh."""
    out = [
        "| recipe, batch 128 | precision | PyTorch eager ms | with torch.compile ms | JAX (XLA) ms | JAX samples/s "
        "against eager's | JAX compile s | JAX steps per program |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    names = [
        ("gpu-quickstart.csv", "quickstart CNN"),
        ("gpu-cifar10.csv", "CIFAR-10 CNN"),
        ("gpu-imdb.csv", "IMDB LSTM"),
    ]
    for name, what in names:
        rows = read(name)[1]
        for precision in ("32-true", "bf16-mixed"):
            mine = [r for r in rows if r["precision"] == precision]
            eager = next(r for r in mine if not r["runtime"] and r["compile"] == "False")
            compiled = next((r for r in mine if not r["runtime"] and r["compile"] == "True"), None)
            jax = next(r for r in mine if r["runtime"] == "jax")
            if jax["error"]:
                jax_cells = f"failed: {jax['error']} | | | "
            else:
                ratio = float(jax["samples_per_s"]) / float(eager["samples_per_s"])
                program = f"{jax['steps_per_execution_used']}, {jax['execution_loop_used']} loop"
                jax_cells = f"{ms(jax['step_ms'])} | **{ratio:.2f}x** | {float(jax['compile_s']):.1f} | {program}"
            out.append(
                f"| {what} | {precision} | {ms(eager['step_ms'])} | {ms(compiled['step_ms']) if compiled else ''} | "
                f"{jax_cells} |"
            )
    return block(out, *(name for name, _ in names))


def accelerator() -> str:
    """Eager PyTorch against XLA:CPU, each cell its own process: bench accelerators=cpu,xla."""
    out = [
        "| accelerator | batch | ran with | first step s | compile s | graphs | step ms | samples/s | host MB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in read("accelerator-quickstart.csv")[1]:
        if r["accelerator"] == "cpu":
            ran = f"eager, {r['precision']}" + (", channels_last" if r["channels_last"] == "True" else "")
            compile_s = graphs = "-"
        else:
            data = "data on the device" if r["on_device"] == "True" else "data streamed"
            ran = f"{r['device']}, {r['steps_per_execution_used']} step(s) a program, {data}"
            compile_s, graphs = f"{float(r['compile_s']):.1f}", r["compiles"]
        out.append(
            f"| {r['accelerator']} | {r['batch']} | {ran} | {float(r['first_step_s']):.2f} | {compile_s} | {graphs} | "
            f"{ms(r['step_ms'])} | {float(r['samples_per_s']):,.0f} | {mb(r['host_peak_mb'])} |"
        )
    return block(out, "accelerator-quickstart.csv")


def fastpath_nobf16() -> str:
    """The CPU fast path's memory-format default on a CPU without native bf16, against contiguous: bench rounds."""
    out = [
        "| net, batch (float32, eager) | NCHW step ms, median (mean) | channels_last step ms, median (mean) "
        "| channels_last samples/s against NCHW's |",
        "|---|---:|---:|---:|",
    ]
    names = [("fastpath-nobf16-quickstart.csv", "quickstart CNN"), ("fastpath-nobf16-cifar10.csv", "CIFAR-10 CNN")]
    for name, net in names:
        by = {r["channels_last"]: r for r in read(name)[1]}
        nchw, cl = by["False"], by["True"]
        out.append(
            f"| {net}, {nchw['batch']} | {ms(nchw['step_ms'])} ({ms(nchw['step_ms_mean'])}) | "
            f"{ms(cl['step_ms'])} ({ms(cl['step_ms_mean'])}) | "
            f"**{float(cl['samples_per_s']) / float(nchw['samples_per_s']):.2f}x** |"
        )
    return block(out, *(name for name, _ in names))


def tokenise() -> str:
    """The IMDB recipe's text preparation with HF tokenizers, the first time and from its cache: bench text."""
    rows = read("text-tokenise.csv")[1]
    out = ["| step | wall s (median) | CPU s, all threads |", "|---|---:|---:|"]
    out += [f"| {r['what']} | {float(r['wall_s']):.2f} | {float(r['cpu_s']):.2f} |" for r in rows]
    return block(out, "text-tokenise.csv")


def k_steps() -> str:
    """The host's and the device's share of a step at K=1 and K=8 unrolled, one bench run a recipe."""
    out = [
        "| recipe, batch | K | compile s | graphs | first execution s | step ms | host ms/step | device ms/step "
        "| host K=8 / K=1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = [("k-quickstart.csv", "quickstart CNN"), ("k-cifar10.csv", "CIFAR-10 CNN"), ("k-imdb.csv", "IMDB LSTM")]
    for name, what in names:
        by = {r["steps_per_execution_used"]: r for r in read(name)[1]}
        for k in ("1", "8"):
            r = by[k]
            share = float(r["host_ms_per_step"]) / float(by["1"]["host_ms_per_step"])
            out.append(
                f"| {what}, {r['batch']} | {k} | {float(r['compile_s']):.1f} | {r['compiles']} | "
                f"{float(r['first_step_s']):.1f} | {ms(r['step_ms'])} | {float(r['host_ms_per_step']):.1f} | "
                f"{float(r['device_ms_per_step']):.1f} | {f'**{share:.2f}**' if k == '8' else ''} |"
            )
    return block(out, *(name for name, _ in names))


def lstm_maxlen() -> str:
    """The LSTM's compile on the training path against maxlen, the recipe's net and a user's: bench lstm."""
    out = [
        "| net | maxlen | first step s | compile s | step ms | samples/s | compile against the shortest |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = [
        ("lstm-maxlen-recipe.csv", "the recipe's LSTM (1 layer, 32)"),
        ("lstm-maxlen-textrnn.csv", "`TextRNN`, `nn.LSTM(64, 64, num_layers=2)`"),
    ]
    for name, net in names:
        rows = sorted(read(name)[1], key=lambda r: int(r["maxlen"]))
        first = float(rows[0]["compile_s"])
        for r in rows:
            out.append(
                f"| {net} | {r['maxlen']} | {float(r['first_step_s']):.2f} | {float(r['compile_s']):.1f} | "
                f"{ms(r['step_ms'])} | {float(r['samples_per_s']):,.0f} | {float(r['compile_s']) / first:.2f}x |"
            )
    return block(out, *(name for name, _ in names))


def own_net() -> str:
    """A user's copy of the built-in CNN against the built-in, alternating bench runs on XLA:CPU."""
    out = ["| net | compile s | step ms | samples/s |", "|---|---:|---:|---:|"]
    means = {}
    for side, what in (("builtin", "built-in `CifarCNN`"), ("copy", "the user's copy (`user_nets.KerasCNN`)")):
        rows = [read(f"own-net-{side}-{n}.csv")[1][0] for n in (1, 2)]
        means[side] = sum(float(r["samples_per_s"]) for r in rows) / len(rows)
        compiles = ", ".join(f"{float(r['compile_s']):.1f}" for r in rows)
        speeds = ", ".join(f"{float(r['samples_per_s']):,.1f}" for r in rows)
        out.append(f"| {what} | {compiles} | {', '.join(ms(r['step_ms']) for r in rows)} | {speeds} |")
    ratio = means["copy"] / means["builtin"]
    out.append(f"\nThe copy's samples/s against the built-in's (means of the two runs): **{ratio:.2f}x**.")
    names = [f"own-net-{side}-{n}.csv" for n in (1, 2) for side in ("builtin", "copy")]
    return block(out, *names)


def serving_forms() -> str:
    """The forms `predict` and `serve` can run a checkpoint in, side by side: bench predict."""
    out = [
        "| form | fp32 | batch 1 median ms | batch 1 p95 ms | x eager (batch 1) | batch 256 samples/s "
        "| max abs diff vs eager end to end | test acc | acc change |",
        "|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for r in read("serving-forms-quickstart.csv")[1]:
        exact = r["what"] == "eager end to end"  # the reference the others are compared with
        out.append(
            f"| {r['what']} | {'yes' if r['fp32'] == 'True' else 'no'} | {float(r['latency_ms_median']):.3f} | "
            f"{float(r['latency_ms_p95']):.3f} | {float(r['speedup_batch1']):.2f} | {float(r['samples_per_s']):,.0f} | "
            + (
                "| | |"
                if exact
                else f"{float(r['max_abs_diff']):.1e} | {float(r['test_acc']):.3f} | {float(r['acc_change']):+.4f} |"
            )
        )
    return block(out, "serving-forms-quickstart.csv")


def serving_load() -> str:
    """The HTTP server under wrk's closed-loop load, batched on the fly against one at a time: bench serve."""
    name = "serve-quickstart.csv"
    about, rows = read(name)
    cells: dict[tuple[int, int], list[dict]] = {}
    for r in rows:
        cells.setdefault((int(r["max_batch_size"]), int(r["concurrency"])), []).append(r)

    def median(runs: list[dict], key: str) -> float:
        return statistics.median(float(r[key]) for r in runs)

    out = [
        "| max_batch_size | connections | requests/s | p50 ms | p99 ms | server CPU % | wrk CPU % | mean batch "
        "| largest batch | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (mbs, clients), runs in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        formed = [tuple(map(int, pair.split(":"))) for r in runs for pair in r["batches_formed"].split()]
        mean = sum(size * n for size, n in formed) / max(1, sum(n for _, n in formed))
        errors = sum(int(r["socket_errors"]) + int(r["non_2xx"]) for r in runs)
        out.append(
            f"| {mbs} | {clients} | {median(runs, 'requests_per_s'):,.0f} | {median(runs, 'p50_ms'):.1f} | "
            f"{median(runs, 'p99_ms'):.1f} | {median(runs, 'server_cpu_pct'):.0f} | "
            f"{median(runs, 'wrk_cpu_pct'):.0f} | "
            f"{mean:.1f} | {max(size for size, n in formed if n)} | {errors} |"
        )
    one, most = min(c for _, c in cells), max(c for _, c in cells)
    batched = max(m for m, _ in cells)
    wait = median(cells[batched, one], "p50_ms") / median(cells[1, one], "p50_ms")
    rate = median(cells[batched, most], "requests_per_s") / median(cells[1, most], "requests_per_s")
    ceiling = float(about["offline ceiling"].split()[0])
    idle = max(float(r["idle_cpu_pct"]) for r in rows)
    out += [
        "",
        f"- A lone client does not wait for a batch: at {one} connection the p50 of `max_batch_size={batched}` is "
        f"**{wait:.2f}x** that of `max_batch_size=1` (the goal: at most 1.3x).",
        f"- At {most} connections batching serves **{rate:.2f}x** the requests/s of `max_batch_size=1` (the goal: at "
        f"least 1.5x), with {sum(int(r['socket_errors']) + int(r['non_2xx']) for r in rows)} socket errors or "
        "non-2xx answers in the whole run.",
        f"- Offline predict at batch 32, preprocessing included, ran at {ceiling:,.0f} samples/s in the same run: "
        f"at {most} connections the server delivers "
        f"{median(cells[batched, most], 'requests_per_s') / ceiling:.0%} of the model's own ceiling. Idle, the "
        f"server's processes used {idle:.1f}% of a core.",
    ]
    return block(out, name)


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


def replicas() -> str:
    """One XLA device against eight under SPMD at one per-device batch: bench replicas."""
    name = "replicas-quickstart.csv"
    rows = sorted(read(name)[1], key=lambda r: int(r["devices"]))
    out = [
        "| devices | batch a device | global batch | compile s | graphs | step ms | host ms/step | samples/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {r['devices']} | {r['batch']} | {r['global_batch']} | {float(r['compile_s']):.1f} | {r['compiles']} | "
        f"{ms(r['step_ms'])} | {float(r['host_ms_per_step']):.1f} | {float(r['samples_per_s']):.1f} |"
        for r in rows
    ]
    return block(out, name)


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


# The assumptions of the TPU estimate, stated on the page: a TPU v5e chip's bf16 peak, the share of it a step's
# matmuls and convolutions reach, and what one of the LSTM's sequential recurrent steps costs there.
V5E_TFLOPS = 197
UTILISATION = (0.5, 0.1)
RECURRENT_US = (5, 10)


def tpu_estimate() -> str:
    """Host and device time per step at K=1 measured on XLA:CPU, and an estimate of a TPU chip's device time from the
    step's counted FLOPs: bench (k-*.csv, k1-resnet.csv) and tools/flops.py (flops.csv)."""
    flops = {r["recipe"]: r for r in read("flops.csv")[1]}
    cases = [
        ("k-quickstart.csv", "quickstart", "CNN"),
        ("k-cifar10.csv", "cifar10", "CNN"),
        ("k1-resnet.csv", "cifar10_resnet", "ResNet-20"),
        ("k-imdb.csv", "imdb", "LSTM"),
    ]
    out = [
        "| model (recipe, batch) | GFLOP a step (counted) | host ms/step (measured) | device ms/step on XLA:CPU "
        "(measured) | device ms/step on a TPU v5e chip (**estimate**) | K for device-bound (**estimate**) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, recipe, what in cases:
        r = next(r for r in read(name)[1] if r["steps_per_execution_used"] == "1")
        gflop = float(flops[recipe]["gflop_per_step"])
        if recipe == "imdb":  # latency-bound: its maxlen recurrent steps, forward and backward, one after another
            steps = 2 * int(re.search(r"maxlen (\d+)", flops[recipe]["input"]).group(1))
            low, high = (steps * us / 1e3 for us in RECURRENT_US)
        else:
            low, high = (gflop / (V5E_TFLOPS * u) for u in UTILISATION)  # GFLOP / (TFLOP/s) = ms
        host = float(r["host_ms_per_step"])
        k_low, k_high = max(1, round(host / high)), max(1, round(host / low))
        out.append(
            f"| {what} (`{recipe}`, {r['batch']}) | {gflop:.1f} | {host:.1f} | {ms(r['device_ms_per_step'])} | "
            f"{low:.2g}-{high:.2g} | {k_low}-{k_high} |"
        )
    return block(out, *(name for name, _, _ in cases), "flops.csv")


def lstm_off_xla() -> str:
    """The recipe's LSTM on the eager CPU, masked as xla_train trains it against a packed sequence: a peer script."""
    name = "lstm-off-xla.csv"
    rows = read(name)[1]
    out = ["| form | step ms (median) | repeats |", "|---|---:|---:|"]
    out += [f"| {r['form']} | {ms(r['step_ms'])} | {r['repeats']} |" for r in rows]
    masked, packed = (float(r["step_ms"]) for r in rows)
    r = rows[0]
    out += [
        "",
        f"Batch {r['batch']}, maxlen {r['maxlen']}, a median review of {r['median_tokens']} tokens "
        f"({float(r['padding']):.0%} of the batch padding), {r['threads']} threads: the masked step is "
        f"**{packed / masked:.2f}x** as fast as the packed one.",
    ]
    return block(out, name)


def sharding_call() -> str:
    """Marking a traced tensor replicated: torch_xla's public call against xla_train's, a peer script."""
    name = "sharding-call.csv"
    rows = read(name)[1]
    out = ["| call | ms a tensor (median of rounds) |", "|---|---:|"]
    out += [f"| {r['call']} | {float(r['ms_per_tensor']):.4f} |" for r in rows]
    public, ours = (float(r["ms_per_tensor"]) for r in rows)
    r = rows[0]
    out += [
        "",
        f"{r['tensors']} fresh traced tensors a round, {r['rounds']} rounds after one of warm-up, {r['devices']} "
        f"XLA:CPU devices: the public call takes **{public / ours:.0f}x** as long.",
    ]
    return block(out, name)


def lstm_unrolled() -> str:
    """torch's own nn.LSTM traced step by step on torch_xla, its first training step against maxlen: a peer script."""
    name = "lstm-unrolled.csv"
    rows = read(name)[1]
    out = [
        "| maxlen | first step s | of which compile s | third step s | of which compile s |",
        "|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {r['maxlen']} | {float(r['first_step_s']):.1f} | {float(r['compile_s']):.1f} | "
        f"{float(r['third_step_s']):.2f} | {float(r['third_compile_s']):.1f} |"
        for r in rows
    ]
    return block(out, name)


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


def auto_k() -> str:
    """steps_per_execution=auto's two choices on XLA:CPU, auto and K=8 alternating in one bench run: one step a program
    traced once (auto, for a run of under 1,000 training steps) against 8 unrolled (auto's from 1,000)."""
    out = [
        "| recipe, batch | K | compile s | first step s | step ms | host ms/step | host MB | K=8 repays its first step "
        "after |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = [("auto-quickstart.csv", "quickstart CNN")]
    for name, what in names:
        rows = read(name)[1]
        one = next(r for r in rows if r["steps_per_execution"] == "auto")
        eight = next(r for r in rows if r["steps_per_execution"] == "8")
        if (one["steps_per_execution_used"], one["traced_once"]) != ("1", "True"):
            raise SystemExit(f"{name}: auto chose K={one['steps_per_execution_used']}, not the one-step program")
        extra = float(eight["first_step_s"]) - float(one["first_step_s"])
        saved = (float(one["step_ms"]) - float(eight["step_ms"])) / 1000
        repaid = f"{extra / saved:,.0f} steps" if saved > 0 else "never: its step is no shorter"
        for r, k in ((one, "1 (auto: traced once)"), (eight, "8, unrolled")):
            out.append(
                f"| {what}, {r['batch']} | {k} | {float(r['compile_s']):.1f} | {float(r['first_step_s']):.2f} | "
                f"{ms(r['step_ms'])} | {float(r['host_ms_per_step']):.1f} | {mb(r['host_peak_mb'])} | "
                f"{repaid if r is eight else ''} |"
            )
    return block(out, *(name for name, _ in names))


def k_up_to_32() -> str:
    """The host's share of a step as K grows to 32 unrolled, the data on the device: one bench run a recipe."""
    out = [
        "| recipe, batch | K | compile s | step ms | host ms/step (wall) | host CPU ms/step | host MB | host CPU "
        "against K=1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = [("k32-quickstart.csv", "quickstart CNN"), ("k32-imdb.csv", "IMDB LSTM")]
    for name, what in names:
        rows = sorted(read(name)[1], key=lambda r: int(r["steps_per_execution_used"]))
        first = float(rows[0]["host_cpu_ms_per_step"])
        for r in rows:
            cpu = float(r["host_cpu_ms_per_step"])
            out.append(
                f"| {what}, {r['batch']} | {r['steps_per_execution_used']} | {float(r['compile_s']):.1f} | "
                f"{ms(r['step_ms'])} | {float(r['host_ms_per_step']):.2f} | {cpu:.2f} | {mb(r['host_peak_mb'])} | "
                f"{f'1/{first / cpu:.0f}' if cpu < first else '1'} |"
            )
    return block(out, *(name for name, _ in names))


def while_loop() -> str:
    """The same K steps as one While loop and unrolled, on XLA:CPU: one bench run, the two loops alternating."""
    out = [
        "| recipe, batch | K | loop | compile s | step ms | host ms/step | host MB | step against unrolled |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    name = "while-quickstart.csv"
    rows = read(name)[1]
    unrolled = {
        r["steps_per_execution_used"]: float(r["step_ms"]) for r in rows if r["execution_loop_used"] == "unroll"
    }
    for r in sorted(rows, key=lambda r: (r["execution_loop_used"], int(r["steps_per_execution_used"]))):
        k = r["steps_per_execution_used"]
        ratio = float(r["step_ms"]) / unrolled[k] if k in unrolled else None
        out.append(
            f"| {r['recipe']} CNN, {r['batch']} | {k} | {r['execution_loop_used']} | {float(r['compile_s']):.1f} | "
            f"{ms(r['step_ms'])} | {float(r['host_ms_per_step']):.2f} | {mb(r['host_peak_mb'])} | "
            f"{f'**{ratio:.1f}x**' if ratio and r['execution_loop_used'] == 'while' else ''} |"
        )
    return block(out, name)


TABLES = {
    "command1": command1,
    "suite": suite,
    "gpu": gpu,
    "runtimes": runtimes,
    "overhead": overhead,
    "keras-steps": keras_steps,
    "keras-job": keras_job,
    "accelerator": accelerator,
    "serving-forms": serving_forms,
    "serving-load": serving_load,
    "batch-curves": batch_curves,
    "replicas": replicas,
    "xla-flags": xla_flags,
    "page-faults": page_faults,
    "huge-pages": huge_pages,
    "tpu-estimate": tpu_estimate,
    "lstm-off-xla": lstm_off_xla,
    "sharding-call": sharding_call,
    "lstm-unrolled": lstm_unrolled,
    "fastpath-nobf16": fastpath_nobf16,
    "tokenise": tokenise,
    "k-steps": k_steps,
    "lstm-maxlen": lstm_maxlen,
    "own-net": own_net,
    "k-up-to-32": k_up_to_32,
    "while-loop": while_loop,
    "auto-k": auto_k,
}


def render(page: str) -> str:
    def fill(m: re.Match) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit(f"docs/results.md names a table {name!r} that tools/results.py has not: {sorted(TABLES)}")
        return m.group(1) + TABLES[name]() + m.group(4)

    return BLOCK.sub(fill, page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/results.md differs from its CSVs")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    written = render(page)
    if args.check:
        stale = [m.group(2) for m, n in zip(BLOCK.finditer(page), BLOCK.finditer(written)) if m.group(0) != n.group(0)]
        if stale:
            print(f"docs/results.md: generated blocks out of date: {', '.join(stale)}; run python tools/results.py")
            return 1
        return 0
    PAGE.write_text(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
