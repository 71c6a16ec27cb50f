"""Tables that set xla_train beside a peer: the other XLA runtime, plain PyTorch on a GPU, Keras 3 on JAX, and a
hand-written torch_xla loop."""

from __future__ import annotations

from result_tables.csvs import block, mb, ms, read, source


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


def overhead_settings() -> str:
    """What each of two host-side settings was worth, xla_train against the plain loop: bench overhead, 2026-11-23."""
    name = "overhead-settings.csv"
    out = [
        "| host-side settings | steady step ms, xla_train / plain | host ms/step, xla_train / plain "
        "| host CPU ms/step, xla_train / plain |",
        "|---|---:|---:|---:|",
    ]

    def pair(r: dict, key: str, digits: int) -> str:
        ours, plain = r[f"xla_train_{key}"], r[f"plain_{key}"]
        if not ours:
            return "not measured"
        return f"{float(ours):.{digits}f} / {float(plain):.{digits}f} ({float(ours) / float(plain):.3f})"

    for r in read(name)[1]:
        note = f" ({r['note']})" if r["note"] else ""
        out.append(
            f"| {r['settings']} | {pair(r, 'step_ms', 1)} | {pair(r, 'host_ms', 2)} | {pair(r, 'host_cpu_ms', 2)}{note} |"
        )
    return block(out, name)
