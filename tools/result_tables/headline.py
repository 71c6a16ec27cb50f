"""The headline claims, each computed from the CSVs its section is generated from: results.md's headline table and the
README's performance table are blocks too, so a figure a page claims cannot outlive the measurement behind it."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from result_tables.csvs import ROOT, read
from result_tables.fast_path import payback_samples, steps
from result_tables.serving import load_summary
from result_tables.xla_steps import ESTIMATED, estimates


@dataclass
class Claim:
    claim: str
    figure: str
    names: tuple[str, ...]  # the CSVs, for the date and the machine
    anchor: str  # the section of docs/results.md with the table and the commands
    short: str = ""  # the README's figure, where it is shorter
    brief: str = ""  # the README's claim, where it is shorter


def f(value: str | float) -> float:
    return float(value)


def x(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def one(name: str, **match: str) -> dict[str, str]:
    return next(r for r in read(name)[1] if all(r[k] == v for k, v in match.items()))


def machine(name: str) -> str:
    """'2-core AMD EPYC' from a CSV's hardware line, or the GPU it measured on."""
    hardware = read(name)[0].get("hardware", "")
    gpu = re.search(r"(NVIDIA [\w ]+?)[);]", hardware + ";")
    if gpu:
        return gpu.group(1)
    cpu = re.match(r"(?:host CPU: )?(.+?)(?: \(a VM[^)]*\))?, (\d+) (?:usable )?core", hardware)
    return f"{cpu.group(2)}-core {cpu.group(1)}" if cpu else "not recorded"


def measured(names: tuple[str, ...]) -> str:
    dates = sorted({read(n)[0].get("date", "")[:10] for n in names})
    dates = [d for d in dates if d[:1].isdigit()] or ["not recorded"]
    machines = sorted({machine(n) for n in names})
    return f"{' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)}, {'; '.join(machines)}"


def gpu() -> Claim:
    fp32 = {n: [r for r in read(f"gpu-{n}.csv")[1] if r["precision"] == "32-true"] for n in ("quickstart", "cifar10")}

    def ratio(rows: list[dict]) -> str:
        jax = next(r for r in rows if r["runtime"] == "jax")
        eager = next(r for r in rows if not r["runtime"] and r["compile"] == "False")
        return x(f(jax["samples_per_s"]), f(eager["samples_per_s"]))

    imdb = {p: [r for r in read("gpu-imdb.csv")[1] if r["precision"] == p] for p in ("32-true", "bf16-mixed")}
    cnn = f"quickstart CNN {ratio(fp32['quickstart'])}, CIFAR-10 CNN {ratio(fp32['cifar10'])}"
    lstm = f"IMDB LSTM {ratio(imdb['32-true'])} cuDNN's ({ratio(imdb['bf16-mixed'])} in bf16)"
    return Claim(
        "XLA on a GPU (`runtime=jax`) against plain PyTorch, batch 128, float32",
        f"{cnn}; {lstm}",
        ("gpu-quickstart.csv", "gpu-cifar10.csv", "gpu-imdb.csv"),
        "on-a-gpu-jaxs-xla-beside-plain-pytorch",
    )


def runtimes() -> Claim:
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


def command1() -> Claim:
    (r,) = read("command1.csv")[1]
    return Claim(
        "README command 1, the run alone",
        f"{r['wall_s']} s by its time line (start-up {r['startup_s']} s, compile {r['compile_s']} s); "
        f"{f(r['held_out_acc']):.2%} held out, {r['predictions_right']} of {r['predictions']} CPU predictions right; "
        f"peak {f(r['peak_mib']):,.0f} MiB",
        ("command1.csv",),
        "the-quickstart-as-a-new-user-runs-it",
        short=f"{r['wall_s']} s, {f(r['held_out_acc']):.1%} held out, peak {f(r['peak_mib']):,.0f} MiB",
    )


def keras_job() -> Claim:
    rows = read("keras-peer-job.csv")[1]
    wall = {s: statistics.median(f(r["wall_s"]) for r in rows if r["side"] == s) for s in ("keras", "xla_train")}
    peak = {s: [f(r["peak_mib"]) for r in rows if r["side"] == s] for s in ("keras", "xla_train")}
    span = {s: f"{min(v):,.0f}-{max(v):,.0f}" if min(v) != max(v) else f"{v[0]:,.0f}" for s, v in peak.items()}
    ratio = f"{x(wall['xla_train'], wall['keras'])} Keras's wall time"
    return Claim(
        "README command 1's whole job against Keras 3 on JAX (process wall time)",
        f"{ratio} (medians of the rounds, {wall['xla_train']:.1f} against {wall['keras']:.1f} s); peak memory "
        f"{span['xla_train']} against {span['keras']} MiB",
        ("keras-peer-job.csv",),
        "the-whole-quickstart-job",
        short=f"{ratio} ({wall['xla_train']:.1f} against {wall['keras']:.1f} s)",
    )


def keras_steps() -> Claim:
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


def own_net() -> Claim:
    means = {}
    for side in ("builtin", "copy"):
        means[side] = statistics.mean(f(read(f"own-net-{side}-{n}.csv")[1][0]["samples_per_s"]) for n in (1, 2))
    return Claim(
        "a user's copy of the built-in CNN, XLA:CPU",
        f"{x(means['copy'], means['builtin'])} the built-in's samples/s (means of two alternating runs each)",
        tuple(f"own-net-{side}-{n}.csv" for side in ("builtin", "copy") for n in (1, 2)),
        "your-own-net-against-the-built-in-one",
    )


def auto_k() -> Claim:
    a, k8 = one("auto-quickstart.csv", steps_per_execution="auto"), one("auto-quickstart.csv", steps_per_execution="8")
    saved = (f(a["step_ms"]) - f(k8["step_ms"])) / 1000
    repaid = f"{(f(k8['first_step_s']) - f(a['first_step_s'])) / saved:,.0f} steps" if saved > 0 else "never"
    return Claim(
        "`steps_per_execution=auto` on XLA:CPU (one step a program traced once under 1,000 training steps, else K=8 "
        "unrolled), the quickstart",
        f"the one-step program compiles in {f(a['compile_s']):.1f} s against K=8's {f(k8['compile_s']):.1f} s, at "
        f"{f(k8['host_peak_mb']) - f(a['host_peak_mb']):,.0f} MB less host memory; K=8's step "
        f"{1 - f(k8['step_ms']) / f(a['step_ms']):.0%} shorter, repaying its longer first step after {repaid}",
        ("auto-quickstart.csv",),
        "what-steps_per_executionauto-chooses",
    )


def k_steps() -> Claim:
    names = (("k-quickstart.csv", "quickstart CNN"), ("k-cifar10.csv", "CIFAR-10 CNN"), ("k-imdb.csv", "IMDB LSTM"))
    host, compile_ = [], []
    for name, what in names:
        k1, k8 = one(name, steps_per_execution_used="1"), one(name, steps_per_execution_used="8")
        host.append(f"{f(k8['host_ms_per_step']) / f(k1['host_ms_per_step']):.2f} ({what})")
        compile_.append(f(k8["compile_s"]) / f(k1["compile_s"]))
    return Claim(
        "host time a step, K=8 unrolled against K=1 traced anew, XLA:CPU",
        f"{', '.join(host)}; K=8 compiling {min(compile_):.1f}-{max(compile_):.1f}x as long",
        tuple(n for n, _ in names),
        "k8-against-k1",
    )


def k_up_to_32() -> Claim:
    parts, grow = [], []
    names = (("k32-quickstart.csv", "quickstart CNN"), ("k32-imdb.csv", "IMDB LSTM"))
    for name, what in names:
        by = {r["steps_per_execution_used"]: r for r in read(name)[1]}
        cpu = {k: f(by[k]["host_cpu_ms_per_step"]) for k in ("1", "8", "32")}
        parts.append(f"{what} {cpu['1']:.1f} against {cpu['8']:.2f} and {cpu['32']:.2f} ms")
        grow.append(f"{f(by['32']['compile_s']) / f(by['8']['compile_s']):.1f}x ({what.split()[-1]})")
    return Claim(
        "host CPU time a step, data on the device, K=1 (traced anew) against K=8 and 32 unrolled",
        f"{'; '.join(parts)}; K=32 compiling {' and '.join(grow)} as long as K=8",
        tuple(n for n, _ in names),
        "data-on-the-device-and-k-up-to-32-unrolled",
    )


def tpu_estimate() -> Claim:
    got = ", ".join(f"{e['k_low']}-{e['k_high']} ({e['what']}, `{e['recipe']}`)" for e in estimates())
    return Claim(
        "the K at which a TPU v5e chip is device-bound",
        f"an **estimate**, not a TPU measurement, from counted FLOPs and this machine's host time at K=1: {got}",
        (*(name for name, _, _ in ESTIMATED), "flops.csv"),
        "host-and-device-time-per-step",
    )


def overhead() -> Claim:
    r = one("overhead-quickstart.csv", side="xla_train")
    steady, host = f"{f(r['ratio']):.2f}x", f"{f(r['host_ratio']):.2f}x"
    return Claim(
        "Lightning's loop against a hand-written torch_xla loop, one step traced anew",
        f"steady step {steady}, host share {host}, host CPU time {f(r['host_cpu_ratio']):.2f}x",
        ("overhead-quickstart.csv",),
        "lightnings-overhead",
        short=f"steady step {steady}, host share {host}",
    )


def accelerator() -> Claim:
    rows = read("accelerator-quickstart.csv")[1]
    parts = []
    for batch in sorted({r["batch"] for r in rows}, key=int):
        cpu, xla = (next(r for r in rows if r["batch"] == batch and r["accelerator"] == a) for a in ("cpu", "xla"))
        parts.append(
            f"batch {batch}: {x(f(xla['samples_per_s']), f(cpu['samples_per_s']))} eager's samples/s "
            f"({f(xla['step_ms']):.1f} against {f(cpu['step_ms']):.1f} ms)"
        )
    return Claim(
        "XLA:CPU against eager PyTorch, quickstart CNN, each at its defaults",
        "; ".join(parts),
        ("accelerator-quickstart.csv",),
        "accelerator-by-batch-size",
    )


def lstm_maxlen() -> Claim:
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


def replicas() -> Claim:
    rows = sorted(read("replicas-quickstart.csv")[1], key=lambda r: -int(r["devices"]))
    many, single = rows[0], rows[-1]
    return Claim(
        f"SPMD over {many['devices']} XLA:CPU devices against {single['devices']}, {many['batch']} samples a device",
        f"compiles once each ({many['compiles']} and {single['compiles']} graph), in {f(many['compile_s']):.1f} "
        f"against {f(single['compile_s']):.1f} s; {f(many['samples_per_s']):.1f} against "
        f"{f(single['samples_per_s']):.1f} samples/s (the devices share the cores)",
        ("replicas-quickstart.csv",),
        "one-xla-device-against-eight",
    )


def huge_pages() -> Claim:
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


def batch_curves() -> Claim:
    rows = read("curves-quickstart.csv")[1]
    batches = sorted({int(r["batch"]) for r in rows})
    last = max(int(r["epoch"]) for r in rows)
    acc = {(int(r["batch"]), int(r["epoch"])): f(r["val_acc"]) for r in rows}

    def at(epoch: int) -> str:
        return " / ".join(f"{acc[b, epoch]:.3f}" for b in batches)

    return Claim(
        "batch size and convergence, quickstart, the recipe's learning rate",
        f"validation accuracy after epoch 1: {at(0)}, after epoch {last + 1}: {at(last)} at batch "
        f"{' / '.join(map(str, batches))}",
        ("curves-quickstart.csv",),
        "batch-size-and-convergence",
    )


def tokenise() -> Claim:
    vocab, encode, cached = read("text-tokenise.csv")[1]
    return Claim(
        f"tokenising {encode['what'].split()[1]} reviews (`bench text`)",
        f"{f(vocab['wall_s']) + f(encode['wall_s']):.1f} s the first time (vocabulary {f(vocab['wall_s']):.1f} s, "
        f"encoding {f(encode['wall_s']):.1f} s), {f(cached['wall_s']):.2f} s from the cache",
        ("text-tokenise.csv",),
        "tokenising-reviews",
    )


def fast_path() -> Claim:
    def default(name: str) -> str:
        at = steps(name)
        return x(f(at["32", "False", "False"]["step_ms"]), f(at["bf16-mixed", "False", "True"]["step_ms"]))

    return Claim(
        "the CPU fast path's default on a CPU with native bf16 (bf16 autocast, channels_last, eager) against fp32 "
        "eager, batch 128",
        f"CNN {default('fastpath-bf16-cifar10.csv')}, ResNet-20 {default('fastpath-bf16-resnet.csv')} the samples/s "
        "(transcribed: the bench CSVs were not kept)",
        ("fastpath-bf16-cifar10.csv", "fastpath-bf16-resnet.csv"),
        "the-cnn-on-a-cpu-with-avx512-bf16",
    )


def payback() -> Claim:
    at = steps("payback-amx.csv")
    eager, compiled = at["bf16-mixed", "False", "False"], at["bf16-mixed", "True", "True"]
    saved_ms = 1e3 / f(eager["samples_per_s"]) - 1e3 / f(compiled["samples_per_s"])
    even = f(compiled["first_step_s"]) * 1e3 / saved_ms
    return Claim(
        "`compile=auto`'s pay-back, the CNN at batch 128",
        f"break-even near {even:,.0f} samples; `compile=auto` compiles from {payback_samples():,} (transcribed from "
        "issue 18)",
        ("payback-amx.csv",),
        "the-pay-back-rules-figures",
    )


def quickstart_cpu() -> Claim:
    d, e = one("quickstart-cpu.csv", side="defaults"), one("quickstart-cpu.csv", side="fp32 eager")
    return Claim(
        "the quickstart on `accelerator=cpu`, the defaults against fp32 eager, whole run",
        f"{d['wall_s']} s against {e['wall_s']} s wall ({x(f(e['wall_s']), f(d['wall_s']))} as fast); "
        f"{f(d['held_out_acc']):.1%} against {f(e['held_out_acc']):.1%} held out (transcribed)",
        ("quickstart-cpu.csv",),
        "the-quickstart-on-the-cpu",
    )


def lstm_off_xla() -> Claim:
    masked, packed = read("lstm-off-xla.csv")[1]
    return Claim(
        "the LSTM off XLA, masked (xla_train's) against a packed sequence, eager CPU",
        f"{x(f(packed['step_ms']), f(masked['step_ms']))} as fast a training step ({f(masked['step_ms']):.1f} "
        f"against {f(packed['step_ms']):,.1f} ms), the same outputs",
        ("lstm-off-xla.csv",),
        "the-lstm-off-xla",
    )


def serving_forms() -> Claim:
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


def serving_load() -> Claim:
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


def sharding_call() -> Claim:
    public, ours = read("sharding-call.csv")[1]
    return Claim(
        f"a sharding call, {public['devices']} XLA:CPU devices",
        f"{f(ours['ms_per_tensor']):.3f} ms a traced tensor, against {f(public['ms_per_tensor']):.3f} for the public "
        f"`xs.mark_sharding` ({f(public['ms_per_tensor']) / f(ours['ms_per_tensor']):.0f}x)",
        ("sharding-call.csv",),
        "a-sharding-calls-cost",
    )


def suite() -> Claim:
    rows = {r["run"]: r for r in read("test-suite.csv")[1] if r["file"] == "(all)"}
    now, before = rows["now"], rows["before"]
    ci = read("ci-runs.csv")[1][-1]
    return Claim(
        "`.ci/run` (install, lint, the default suite on two workers) on a fresh clone",
        f"on CI's machine {f(ci['ci_s']) / 60:.1f} min at {ci['commit']} ({f(ci['ci_s']) / f(ci['local_s']):.2f}x this "
        f"VM's time); the suite alone here {f(now['wall_s']):,.0f} s against {f(before['wall_s']):,.0f} s before its "
        f"last speed-up ({x(f(now['wall_s']), f(before['wall_s']))}), {now['tests']} tests",
        ("ci-runs.csv", "test-suite.csv"),
        "the-test-suite",
    )


CLAIMS = [
    gpu,
    runtimes,
    command1,
    keras_steps,
    keras_job,
    own_net,
    auto_k,
    k_steps,
    k_up_to_32,
    tpu_estimate,
    overhead,
    accelerator,
    lstm_maxlen,
    replicas,
    huge_pages,
    batch_curves,
    tokenise,
    fast_path,
    payback,
    quickstart_cpu,
    lstm_off_xla,
    serving_forms,
    serving_load,
    sharding_call,
    suite,
]
# The README's performance table: at most 8 rows, each a claim above in its shorter wording.
README = [command1, keras_job, keras_steps, gpu, runtimes, lstm_maxlen, overhead, serving_load]


def section(anchor: str) -> str:
    """The heading of docs/results.md that GitHub gives this anchor; a claim whose section is gone stops the page."""
    for line in (ROOT / "docs" / "results.md").read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip()
            if re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-") == anchor:
                return text
    raise SystemExit(f"docs/results.md has no section #{anchor}, which a headline claim links to")


def headline() -> str:
    out = ["| claim | figure | measured | evidence |", "|---|---|---|---|"]
    for claim in (c() for c in CLAIMS):
        link = f"[{section(claim.anchor)}](#{claim.anchor})"
        out.append(f"| {claim.claim} | {claim.figure} | {measured(claim.names)} | {link} |")
    return "\n".join(out) + "\n"


def performance() -> str:
    out = ["| claim | figure | measured | evidence |", "| --- | --- | --- | --- |"]
    for claim in (c() for c in README):
        out.append(
            f"| {claim.brief or claim.claim} | {claim.short or claim.figure} | {measured(claim.names)} | "
            f"[{section(claim.anchor)}](docs/results.md#{claim.anchor}) |"
        )
    return "\n".join(out) + "\n"
