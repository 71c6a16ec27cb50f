"""`bench text`: how long the IMDB text pipeline takes: the vocabulary, tokenising every review, reloading the cache.

Synthetic reviews of aclImdb's lengths (bench/data.py) give the real work per review without the data set;
generating them is not timed. The product's own functions (preprocess/text.py) are timed as wall time and as
CPU time over all threads: `tokenizers` runs on every core, and TPU hosts have dozens (docs/results.md,
"bench predict, curves and text").
"""

from __future__ import annotations

import io
import resource
import statistics
from pathlib import Path

import numpy as np
from jsonargparse.typing import PositiveInt

from xla_train.bench import report
from xla_train.bench.data import synthetic_reviews
from xla_train.bench.timing import time_calls
from xla_train.preprocess import text as pipeline


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def text(
    reviews: PositiveInt = 50_000,
    maxlen: PositiveInt = 500,
    vocab_size: PositiveInt = 10_000,
    repeats: PositiveInt = 3,
    runs_dir: str = "runs",
    command: str = "",
) -> tuple[int, Path]:
    texts = synthetic_reviews(reviews)
    train = texts[: max(1, len(texts) // 2)]
    state = {}
    buf = io.BytesIO()

    def vocabulary():
        state["tok"] = pipeline.build_tokenizer(train, vocab_size)

    def encode():
        state["ids"] = pipeline.encode(state["tok"], texts, maxlen)
        buf.seek(0), buf.truncate()
        np.savez(buf, x=state["ids"].astype(np.uint16))

    def reload():
        buf.seek(0)
        with np.load(buf) as z:
            z["x"].astype(np.int64)

    rows = []
    for what, fn in (
        (f"vocabulary from {len(train):,} reviews", vocabulary),
        (f"encode {len(texts):,} reviews (and save the arrays)", encode),
        ("reload the cached arrays", reload),
    ):
        c0 = cpu_seconds()
        walls = time_calls([fn], repeats, warmup=0)[0]
        rows.append({"what": what, "wall_s": statistics.median(walls), "cpu_s": (cpu_seconds() - c0) / repeats})
    prov = report.provenance(command, [f"CPU, tokenizers on {report.cpu_summary()}"])
    run_dir = report.new_run_dir(runs_dir)
    words = sum(len(t.split()) for t in texts)
    notes = [
        f"{len(texts):,} synthetic reviews of aclImdb's lengths, {words / len(texts):.0f} words each on average;"
        f" vocabulary {vocab_size:,}, maxlen {maxlen}; median of {repeats} (CPU: mean over all threads)"
    ]
    headers = ["", "wall s", "CPU s"]
    table = [[r["what"], f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}"] for r in rows]
    report.publish(
        run_dir, "text", "xla_train text pipeline", prov, rows, ["what", "wall_s", "cpu_s"], headers, table, notes
    )
    return 0, run_dir
