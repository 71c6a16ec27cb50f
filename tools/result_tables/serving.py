"""Tables of serving a checkpoint: the forms it runs in, and the HTTP server under load."""

from __future__ import annotations

import statistics

from result_tables.claims import Claim, f, one
from result_tables.csvs import block, read


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


def load_cells(name: str = "serve-quickstart.csv") -> dict[tuple[int, int], list[dict]]:
    """The wrk runs of one bench serve CSV, by (max_batch_size, connections)."""
    cells: dict[tuple[int, int], list[dict]] = {}
    for r in read(name)[1]:
        cells.setdefault((int(r["max_batch_size"]), int(r["concurrency"])), []).append(r)
    return cells


def median(runs: list[dict], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def load_summary(name: str = "serve-quickstart.csv") -> dict[str, float]:
    """The goals' figures: a lone client's p50 and the most connections' requests/s, batched against one at a time."""
    cells = load_cells(name)
    one, most = min(c for _, c in cells), max(c for _, c in cells)
    batched = max(m for m, _ in cells)
    return {
        "one": one,
        "most": most,
        "batched": batched,
        "wait": median(cells[batched, one], "p50_ms") / median(cells[1, one], "p50_ms"),
        "rate": median(cells[batched, most], "requests_per_s") / median(cells[1, most], "requests_per_s"),
        "requests_per_s": median(cells[batched, most], "requests_per_s"),
        "errors": sum(int(r["socket_errors"]) + int(r["non_2xx"]) for runs in cells.values() for r in runs),
    }


def serving_load() -> str:
    """The HTTP server under wrk's closed-loop load, batched on the fly against one at a time: bench serve."""
    name = "serve-quickstart.csv"
    about, rows = read(name)
    cells = load_cells(name)
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
    got = load_summary(name)
    one, most, batched = got["one"], got["most"], got["batched"]
    ceiling = float(about["offline ceiling"].split()[0])
    idle = max(float(r["idle_cpu_pct"]) for r in rows)
    out += [
        "",
        f"- A lone client does not wait for a batch: at {one} connection the p50 of `max_batch_size={batched}` is "
        f"**{got['wait']:.2f}x** that of `max_batch_size=1` (the goal: at most 1.3x).",
        f"- At {most} connections batching serves **{got['rate']:.2f}x** the requests/s of `max_batch_size=1` (the "
        f"goal: at least 1.5x), with {got['errors']} socket errors or non-2xx answers in the whole run.",
        f"- Offline predict at batch 32, preprocessing included, ran at {ceiling:,.0f} samples/s in the same run: "
        f"at {most} connections the server delivers "
        f"{got['requests_per_s'] / ceiling:.0%} of the model's own ceiling. Idle, the "
        f"server's processes used {idle:.1f}% of a core.",
    ]
    return block(out, name)


def serving_forms_claim() -> Claim:
    eager, ort = (
        one("serving-forms-quickstart.csv", what="eager"),
        one("serving-forms-quickstart.csv", what="onnxruntime"),
    )
    return Claim(
        "serving forms, quickstart CNN, batch 1",
        f"ONNX Runtime {f(ort['speedup_batch1']):.2f}x eager ({f(ort['latency_ms_median']):.3f} against "
        f"{f(eager['latency_ms_median']):.3f} ms), within {f(ort['max_abs_diff']):.1e}",
        ("serving-forms-quickstart.csv",),
        "inference-speed-by-serving-form",
    )


def serving_load_claim() -> Claim:
    s = load_summary()
    rate = f"{s['requests_per_s']:,.0f} requests/s at {s['most']} connections, {s['rate']:.2f}x `max_batch_size=1`"
    return Claim(
        "`serve` under `wrk`, quickstart CNN",
        f"{rate} (goal 1.5x); at {s['one']} connection p50 {s['wait']:.2f}x its (goal at most 1.3x); "
        f"{s['errors']} errors",
        ("serve-quickstart.csv",),
        "serving-over-http-under-load",
        short=f"{s['requests_per_s']:,.0f} requests/s at {s['most']} connections, {s['rate']:.2f}x unbatched",
    )
