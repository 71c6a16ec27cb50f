"""How long the IMDB text pipeline takes: vocabulary, tokenising 50,000 reviews, and reloading the cache.

    python -m xla_train.bench.text [--reviews 50000] [--maxlen 500] [--repeats 3]

The real aclImdb is not needed: the reviews are synthetic but shaped like it
(word counts log-normal with aclImdb's median of ~174 and mean of ~230 words, a
Zipf vocabulary, capitals, punctuation and `<br />` breaks), so the work per
review is the same. Generating them is not timed. Each figure is the median of
--repeats runs, as wall time and as CPU time summed over threads. The same
normalisation and splitting done with Python's `re` and a dict is timed beside
it: per core it is about twice as fast as `tokenizers`, but it runs on one core,
while `tokenizers` uses every core (its Rust thread pool), and TPU hosts have
dozens. Either way the arrays are cached, so this is paid once per setting.
"""
from __future__ import annotations

import argparse
import datetime
import io
import re
import statistics
import sys
import time

import numpy as np

from xla_train.bench.report import cpu_summary
from xla_train.data import text

PUNCT = np.array([".", ",", "!", "?", "...", ";", ":"])


def synthetic_reviews(n: int, seed: int = 0, words: int = 60_000) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    lengths = rng.integers(1, 11, words)
    vocab = np.array(["".join(rng.choice(letters, k)) for k in lengths])
    cdf = np.cumsum(1.0 / np.arange(1, words + 1))
    cdf /= cdf[-1]
    counts = np.clip(rng.lognormal(np.log(174), 0.75, n).astype(int), 10, 2500)
    toks = vocab[np.minimum(np.searchsorted(cdf, rng.random(counts.sum())), words - 1)]
    marks = rng.random(len(toks))
    toks = np.where(marks < 0.03, np.char.capitalize(toks), toks)
    toks = np.where(marks < 0.06, np.char.add(toks, rng.choice(PUNCT, len(toks))), toks)
    toks = np.where(marks > 0.995, np.char.add(toks, ".<br /><br />"), toks)
    out, start = [], 0
    for c in counts:
        out.append(" ".join(toks[start:start + c]).capitalize() + ".")
        start += c
    return out


def python_baseline(train: list[str], texts: list[str], vocab_size: int, maxlen: int) -> np.ndarray:
    """The same vocabulary and ids with `re` and a dict, single-threaded."""
    split = re.compile(r"\w+|[^\w\s]+")
    br = re.compile(r"<br\s*/?>")
    from collections import Counter

    counts = Counter()
    for t in train:
        counts.update(split.findall(br.sub(" ", t).lower()))
    words = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - 2]
    ids = {w: i + 2 for i, w in enumerate(words)}
    rows = [[ids.get(w, text.UNK_ID) for w in split.findall(br.sub(" ", t).lower())] for t in texts]
    return text.fit_to_length(rows, maxlen)


def cpu_seconds() -> float:
    try:
        import resource
    except ImportError:  # not on Unix: wall time only
        return float("nan")
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, repeats: int):
    """(median wall seconds, median CPU seconds over all threads, the last result)."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        c0, t0 = cpu_seconds(), time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu_seconds() - c0)
    return statistics.median(walls), statistics.median(cpus), result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reviews", type=int, default=50_000, help="all of them are tokenised; the first half is 'train'")
    p.add_argument("--maxlen", type=int, default=500)
    p.add_argument("--vocab-size", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-baseline", action="store_true", help="skip the pure-Python comparison")
    args = p.parse_args(argv)
    from importlib.metadata import version

    reviews = synthetic_reviews(args.reviews)
    train = reviews[: len(reviews) // 2]
    words = sum(len(r.split()) for r in reviews)
    print(f"hardware: {cpu_summary()}; tokenizers {version('tokenizers')}, numpy {np.__version__}; "
          f"{datetime.date.today().isoformat()}")
    print(f"{len(reviews):,} synthetic reviews, {words / len(reviews):.0f} words each on average "
          f"({sum(map(len, reviews)) / 1e6:.0f} MB); vocabulary {args.vocab_size:,} from the first "
          f"{len(train):,}; maxlen {args.maxlen}; median of {args.repeats}\n")

    t_vocab = timed(lambda: text.build_tokenizer(train, args.vocab_size), args.repeats)
    tok = t_vocab[2]
    t_encode = timed(lambda: text.encode(tok, reviews, args.maxlen), args.repeats)
    ids = t_encode[2]
    buf = io.BytesIO()
    np.savez(buf, x=ids.astype(np.uint16))

    def reload():
        buf.seek(0)
        with np.load(buf) as z:
            return z["x"].astype(np.int64)

    rows = [("vocabulary (tokenizers WordLevel trainer)", *t_vocab[:2]),
            (f"encode {len(reviews):,} reviews (encode_batch_fast)", *t_encode[:2]),
            ("total, first run", t_vocab[0] + t_encode[0], t_vocab[1] + t_encode[1]),
            (f"reload the cached arrays ({buf.getbuffer().nbytes / 1e6:.0f} MB .npz)", *timed(reload, args.repeats)[:2])]
    if not args.no_baseline:
        wall, cpu, py_ids = timed(lambda: python_baseline(train, reviews, args.vocab_size, args.maxlen), 1)
        rows.append((f"pure Python re + dict, both steps (ids {'identical' if np.array_equal(py_ids, ids) else 'DIFFER'})",
                     wall, cpu))
    width = max(len(r[0]) for r in rows)
    print(f"{'':<{width}}  {'wall':>7}  {'CPU':>7}")
    for name, wall, cpu in rows:
        print(f"{name:<{width}}  {wall:6.2f}s  {cpu:6.2f}s")
    print(f"\nencode: {words / t_encode[0] / 1e6:.2f} M words/s on {t_encode[1] / t_encode[0]:.1f} busy core(s); "
          f"CPU time per review {t_encode[1] / len(reviews) * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
