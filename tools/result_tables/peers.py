"""Tables that set xla_train beside a peer: the other XLA runtime, plain PyTorch on a GPU, Keras 3 on JAX, and a
hand-written loop on the same runtime."""

from __future__ import annotations

import statistics

from result_tables.claims import Claim, f, one, x
from result_tables.csvs import block, commands, mb, ms, read, source


def _grouping(r: dict) -> str:
    """A cell's K, and its loop where K > 1: "32, while", "1"."""
    return r["steps_per_execution_used"] + (f", {r['execution_loop_used']}" if r["execution_loop_used"] else "")


RUNTIMES = ("runtimes-quickstart.csv", "runtimes-imdb.csv", "runtimes-lstm-maxlen.csv")


def runtimes_commands() -> str:
    """The commands of the runtimes' table, from its CSVs."""
    return commands(*RUNTIMES)


def runtimes() -> str:
    """torch_xla against JAX, the same cells alternating in one run: bench runtimes=torch_xla,jax."""
    head = (
        "| cell | K, loop (torch_xla / jax) | torch_xla step ms | jax step ms | jax samples/s against torch_xla's "
        "| compile s (torch_xla / jax) | host MB (torch_xla / jax) |\n|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for name, cell in (
        ("runtimes-quickstart.csv", "quickstart CNN, batch 32, recipe defaults"),
        ("runtimes-imdb.csv", "IMDB LSTM, batch 128, maxlen 500, recipe defaults"),
    ):
        by = {r["runtime"]: r for r in read(name)[1]}
        t, j = by["torch_xla"], by["jax"]
        ratio = float(j["samples_per_s"]) / float(t["samples_per_s"])
        grouping = " / ".join(map(_grouping, (t, j)))
        rows.append(
            f"| {cell} | {grouping} | {ms(t['step_ms'])} | {ms(j['step_ms'])} | **{ratio:.2f}x** | "
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
    lstm_grouping = " / ".join(_grouping(at[rt, maxlens[0]]) for rt in ("torch_xla", "jax"))
    compiles = f"{per('torch_xla', 'compile_s', lambda v: f'{float(v):.1f}')} and {per('jax', 'compile_s', lambda v: f'{float(v):.1f}')}"
    rows.append(
        f"| IMDB LSTM, maxlen {' / '.join(map(str, maxlens))} (`bench lstm`) | {lstm_grouping} | "
        f"{per('torch_xla', 'step_ms', ms)} | "
        f"{per('jax', 'step_ms', ms)} | {ratios} | {compiles} | |"
    )

    def line(runtime: str) -> tuple[float, float]:  # (ms per time step, ms at no time step): maxlen's end points
        lo, hi = (float(at[runtime, m]["step_ms"]) for m in (maxlens[0], maxlens[-1]))
        slope = (hi - lo) / (maxlens[-1] - maxlens[0])
        return slope, lo - slope * maxlens[0]

    (ts, tr), (js, jr) = line("torch_xla"), line("jax")
    rows.append(
        f"| the same, per time step + the rest, ms (maxlen {maxlens[0]} to {maxlens[-1]}) | | {ts:.3f} + {tr:.1f} | "
        f"{js:.3f} + {jr:.1f} | {ts / js:.2f}x per time step | | |"
    )
    return head + "\n".join(rows) + "\n\n" + source(*RUNTIMES)


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
            jax = next(
                r for r in (_imdb_default(precision) if name == "gpu-imdb.csv" else mine) if r["runtime"] == "jax"
            )
            if jax["error"]:
                jax_cells = f"failed: {jax['error']} | | | "
            else:
                ratio = float(jax["samples_per_s"]) / float(eager["samples_per_s"])
                program = f"{jax['steps_per_execution_used']}, {jax['execution_loop_used']} loop"
                if name == "gpu-imdb.csv":
                    program += f"; scan {GPU_CHUNK} time steps per iteration"
                jax_cells = f"{ms(jax['step_ms'])} | **{ratio:.2f}x** | {float(jax['compile_s']):.1f} | {program}"
            out.append(
                f"| {what} | {precision} | {ms(eager['step_ms'])} | {ms(compiled['step_ms']) if compiled else ''} | "
                f"{jax_cells} |"
            )
    return block(out, *(name for name, _ in names), *GPU_DEFAULT_CHUNK.values())


# The IMDB LSTM's JAX cells at the GPU's default chunk (runtime/jax/strategy.py's SCAN_CHUNKS), from the sweep
# that chose it; gpu-imdb.csv's own JAX cells ran at 1. These CSVs predate bench's scan_chunk column, so the chunks
# are named here.
GPU_CHUNK = 4
GPU_DEFAULT_CHUNK = {"32-true": "gpu-imdb-chunk4.csv", "bf16-mixed": "gpu-imdb-chunk4-bf16.csv"}
# (file, chunk) of each IMDB LSTM cell on JAX in the sweep, in the order they are tabled (a setting besides the
# chunk is named with it)
GPU_CHUNKS = [
    ("gpu-imdb.csv", 1),
    ("gpu-imdb-chunk2.csv", 2),
    ("gpu-imdb-chunk4.csv", 4),
    ("gpu-imdb-chunk4-again.csv", 4),
    ("gpu-imdb-chunk8.csv", 8),
    ("gpu-imdb-chunk16.csv", 16),
    ("gpu-imdb-chunk4-bf16.csv", 4),
    ("gpu-imdb-chunk16-bf16.csv", 16),
    ("gpu-imdb-chunk4-command-buffers.csv", "4, with XLA's command buffers for While loops (another machine)"),
]


def _imdb_default(precision: str) -> list[dict]:
    return [r for r in read(GPU_DEFAULT_CHUNK[precision])[1] if r["precision"] == precision]


def gpu_chunks() -> str:
    """The IMDB LSTM on JAX on a GPU at each number of time steps its scan runs per loop iteration
    (XLA_TRAIN_SCAN_CHUNK), against eager PyTorch's cuDNN LSTM in gpu-imdb.csv: tools/gpu_bench.sh's chunks."""
    eager = {r["precision"]: r for r in read("gpu-imdb.csv")[1] if not r["runtime"]}
    out = [
        "| time steps per loop iteration | precision | JAX step ms | JAX samples/s against eager PyTorch's (cuDNN) "
        "| JAX compile s | JAX first step s |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for precision in ("32-true", "bf16-mixed"):
        for name, chunk in GPU_CHUNKS:
            for r in read(name)[1]:
                if r["runtime"] == "jax" and (r["precision"] or "32-true") == precision:  # "": the recipe's, 32
                    ratio = float(r["samples_per_s"]) / float(eager[precision]["samples_per_s"])
                    out.append(
                        f"| {chunk} | {precision} | {ms(r['step_ms'])} | **{ratio:.2f}x** | "
                        f"{float(r['compile_s']):.1f} | {float(r['first_step_s']):.1f} |"
                    )
    return block(out, *(name for name, _ in GPU_CHUNKS))


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
    for side in dict.fromkeys(r["side"] for r in rows):  # as the CSV lists them: each runtime, each floor
        mine = [r for r in rows if r["side"] == side]
        accs = [f"{float(r['held_out_acc']):.2%}" for r in mine if r["held_out_acc"]]
        out.append(
            f"| {side} | {' / '.join(r['wall_s'] for r in mine)} | {' / '.join(mb(r['peak_mib']) for r in mine)} | "
            f"{' / '.join(accs)} |"
        )
    return block(out, "keras-peer-job.csv")


OVERHEAD = {"torch_xla": "overhead-quickstart.csv", "jax": "overhead-quickstart-jax.csv"}  # runtime -> bench overhead


def same_first_loss(plain: dict, ours: dict) -> bool:
    """Whether the two sides' first-step losses agree as bench overhead requires (bench/overhead.py, LOSS_RTOL)."""
    a, b = f(plain["first_loss"]), f(ours["first_loss"])
    return abs(a - b) <= 1e-5 * max(abs(a), abs(b))


def overhead() -> str:
    """Lightning's step against a hand-written loop on the same runtime, the same layer rewrites: bench overhead."""
    out = [
        "| runtime | side | steady step ms | host ms a step | host CPU ms a step | first-step loss |",
        "|---|---|---:|---:|---:|---|",
    ]
    for runtime, name in OVERHEAD.items():
        by = {r["side"]: r for r in read(name)[1]}
        p, o = by["plain"], by["xla_train"]
        for side, r in ((f"plain {runtime} loop", p), ("xla_train (Lightning)", o)):
            out.append(
                f"| {runtime} | {side} | {ms(r['step_ms'])} | {f(r['host_ms_per_step']):.1f} | "
                f"{f(r['host_cpu_ms_per_step']):.1f} | {r['first_loss']} |"
            )
        out.append(
            f"| {runtime} | xla_train / plain | **{f(o['ratio']):.3f}** | **{f(o['host_ratio']):.2f}** | "
            f"**{f(o['host_cpu_ratio']):.2f}** | {'equal' if same_first_loss(p, o) else 'NOT equal'} |"
        )
    return block(out, *OVERHEAD.values())


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


def gpu_claim() -> Claim:
    fp32 = {n: [r for r in read(f"gpu-{n}.csv")[1] if r["precision"] == "32-true"] for n in ("quickstart", "cifar10")}

    def ratio(rows: list[dict]) -> str:
        jax = next(r for r in rows if r["runtime"] == "jax")
        eager = next(r for r in rows if not r["runtime"] and r["compile"] == "False")
        return x(f(jax["samples_per_s"]), f(eager["samples_per_s"]))

    eager = [r for r in read("gpu-imdb.csv")[1] if not r["runtime"]]
    imdb = {p: [r for r in eager if r["precision"] == p] + _imdb_default(p) for p in ("32-true", "bf16-mixed")}
    cnn = f"quickstart CNN {ratio(fp32['quickstart'])}, CIFAR-10 CNN {ratio(fp32['cifar10'])}"
    lstm = f"IMDB LSTM {ratio(imdb['32-true'])} cuDNN's ({ratio(imdb['bf16-mixed'])} in bf16)"
    return Claim(
        "XLA on a GPU (`runtime=jax`) against plain PyTorch, batch 128, float32",
        f"{cnn}; {lstm}",
        ("gpu-quickstart.csv", "gpu-cifar10.csv", "gpu-imdb.csv", *GPU_DEFAULT_CHUNK.values()),
        "on-a-gpu-jaxs-xla-beside-plain-pytorch",
    )


def runtimes_claim() -> Claim:
    cells = []
    for name, what in (("runtimes-quickstart.csv", "quickstart CNN"), ("runtimes-imdb.csv", "IMDB LSTM")):
        t, j = one(name, runtime="torch_xla"), one(name, runtime="jax")
        cells.append((what, x(f(j["samples_per_s"]), f(t["samples_per_s"])), t, j))
    long = "; ".join(f"{w} {r} ({f(j['step_ms']):.1f} against {f(t['step_ms']):.1f} ms a step)" for w, r, t, j in cells)
    return Claim(
        "JAX runtime against torch_xla, recipe defaults, XLA:CPU: samples/s",
        long,
        ("runtimes-quickstart.csv", "runtimes-imdb.csv"),
        "runtimes-side-by-side",
        short=", ".join(f"{w} {r}" for w, r, _, _ in cells),
    )


def keras_job_claim() -> Claim:
    rows = read("keras-peer-job.csv")[1]
    sides = [s for s in ("keras", "xla_train", "xla_train jax") if any(r["side"] == s for r in rows)]
    wall = {s: statistics.median(f(r["wall_s"]) for r in rows if r["side"] == s) for s in sides}
    peak = {s: [f(r["peak_mib"]) for r in rows if r["side"] == s] for s in sides}
    span = {s: f"{min(v):,.0f}-{max(v):,.0f}" if min(v) != max(v) else f"{v[0]:,.0f}" for s, v in peak.items()}
    ratio = f"{x(wall['xla_train'], wall['keras'])} Keras's wall time"
    on_jax = (
        f"; runtime=jax {x(wall['xla_train jax'], wall['keras'])} ({wall['xla_train jax']:.1f} s, peak "
        f"{span['xla_train jax']} MiB)"
        if "xla_train jax" in wall
        else ""
    )
    return Claim(
        "README command 1's whole job against Keras 3 on JAX (process wall time)",
        f"{ratio} (medians of the rounds, {wall['xla_train']:.1f} against {wall['keras']:.1f} s); peak memory "
        f"{span['xla_train']} against {span['keras']} MiB{on_jax}",
        ("keras-peer-job.csv",),
        "the-whole-quickstart-job",
        short=f"{ratio} ({wall['xla_train']:.1f} against {wall['keras']:.1f} s)",
    )


def keras_steps_claim() -> Claim:
    rows = [r for r in read("keras-peer-steps.csv")[1] if r["side"] == "xla_train" or "=1" in r["setting"]]
    speed = {(r["model"], r["side"], r["round"]): f(r["samples_per_s"]) for r in rows}
    rounds = sorted({r["round"] for r in rows})

    def ratios(model: str, theirs: str) -> str:
        return " and ".join(x(speed[model, "xla_train", n], speed[model, theirs, n]) for n in rounds)

    lstm = f"{ratios('imdb_lstm', 'keras_tutorial')} the tutorial's model, {ratios('imdb_lstm', 'keras_matched')}"
    return Claim(
        "training steps against Keras 3 on JAX, XLA:CPU, samples/s by round: the IMDB LSTM against the tutorial's "
        "model and one matched to ours (masked); the quickstart CNN",
        f"LSTM (batch 128) {lstm} the matched one; CNN (batch 32) {ratios('quickstart_cnn', 'keras')}",
        ("keras-peer-steps.csv",),
        "steps-per-second",
        short=f"{lstm} the matched one",
        brief="IMDB LSTM training steps against Keras 3 on JAX: the tutorial's model, and one matched to ours (masked)",
    )


def overhead_claim() -> Claim:
    def figures(runtime: str) -> tuple[dict, str]:
        rows = {r["side"]: r for r in read(OVERHEAD[runtime])[1]}
        equal = "equal" if same_first_loss(rows["plain"], rows["xla_train"]) else "NOT equal"
        return rows["xla_train"], equal

    (t, t_loss), (j, j_loss) = figures("torch_xla"), figures("jax")
    steady = f"steady step {f(t['ratio']):.2f}x, host share {f(t['host_ratio']):.2f}x"
    return Claim(
        "Lightning's loop against a hand-written loop with the same layer rewrites, XLA:CPU: torch_xla (one step "
        "traced anew) and JAX",
        f"torch_xla: {steady}, host CPU time {f(t['host_cpu_ratio']):.2f}x, first-step losses {t_loss}; JAX: steady "
        f"step {f(j['ratio']):.2f}x, host share {f(j['host_ratio']):.2f}x, first-step losses {j_loss}",
        tuple(OVERHEAD.values()),
        "lightnings-overhead",
        short=f"torch_xla: {steady}; JAX: steady step {f(j['ratio']):.2f}x",
        brief="Lightning's loop against a hand-written loop, the same layer rewrites",
    )
