"""Tables of the IMDB LSTM and its text: compile against maxlen, torch's unrolled LSTM, the LSTM off XLA, and
tokenising."""

from __future__ import annotations

from result_tables.claims import Claim, f, x
from result_tables.csvs import block, ms, read


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


def tokenise() -> str:
    """The IMDB recipe's text preparation with HF tokenizers, the first time and from its cache: bench text."""
    rows = read("text-tokenise.csv")[1]
    out = ["| step | wall s (median) | CPU s, all threads |", "|---|---:|---:|"]
    out += [f"| {r['what']} | {float(r['wall_s']):.2f} | {float(r['cpu_s']):.2f} |" for r in rows]
    return block(out, "text-tokenise.csv")


def lstm_maxlen_claim() -> Claim:
    rows = sorted(read("lstm-maxlen-recipe.csv")[1], key=lambda r: int(r["maxlen"]))
    flat = " / ".join(f"{f(r['compile_s']):.1f}" for r in (rows[0], rows[-1]))
    at = f"maxlen {rows[0]['maxlen']} / {rows[-1]['maxlen']}"
    unrolled = read("lstm-unrolled.csv")[1]
    torch_lstm = " and ".join(f"{f(r['compile_s']):.1f} s" for r in unrolled)
    return Claim(
        "the LSTM's compile time against `maxlen`, training, XLA:CPU",
        f"flat for the recipe's: {flat} s at {at}; torch's `nn.LSTM` unrolled on torch_xla: {torch_lstm} at maxlen "
        f"{' and '.join(r['maxlen'] for r in unrolled)}",
        ("lstm-maxlen-recipe.csv", "lstm-unrolled.csv"),
        "compile-time-against-maxlen",
        short=f"flat: {flat} s at {at}",
    )


def tokenise_claim() -> Claim:
    vocab, encode, cached = read("text-tokenise.csv")[1]
    return Claim(
        f"tokenising {encode['what'].split()[1]} reviews (`bench text`)",
        f"{f(vocab['wall_s']) + f(encode['wall_s']):.1f} s the first time (vocabulary {f(vocab['wall_s']):.1f} s, "
        f"encoding {f(encode['wall_s']):.1f} s), {f(cached['wall_s']):.2f} s from the cache",
        ("text-tokenise.csv",),
        "tokenising-reviews",
    )


def lstm_off_xla_claim() -> Claim:
    masked, packed = read("lstm-off-xla.csv")[1]
    return Claim(
        "the LSTM off XLA, masked (xla_train's) against a packed sequence, eager CPU",
        f"{x(f(packed['step_ms']), f(masked['step_ms']))} as fast a training step ({f(masked['step_ms']):.1f} "
        f"against {f(packed['step_ms']):,.1f} ms), the same outputs",
        ("lstm-off-xla.csv",),
        "the-lstm-off-xla",
    )
