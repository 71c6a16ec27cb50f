"""Keras 3 on JAX training the same nets, so xla_train's step time and whole job can be quoted as ratios to a peer.

Both sides hand the step to XLA; what differs is the framework around it, which is what docs/results.md compares.
This is a peer measurement, not part of the package or its tests: it needs Keras and JAX, which xla_train does not,
so it runs in its own virtual environment, never the project's:

    python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install 'keras>=3.10,<4' 'jax[cpu]' scikit-learn
    /tmp/kvenv/bin/python xla_train/bench/peers/keras_jax_peer.py --model all --steps 24 --warmup 8 --rounds 1
    /tmp/kvenv/bin/python xla_train/bench/peers/keras_jax_peer.py --job quickstart --xla-train-python .venv/bin/python --rounds 2
    /tmp/kvenv/bin/python xla_train/bench/peers/keras_jax_peer.py --job quickstart --xla-train-python .venv/bin/python --seeds 10

Steps: synthetic data of the recipes' shapes and dtypes (a step's cost does not depend on the values). Two LSTMs:
`lstm_tutorial` is the tutorial's own model as written (no mask: padding steps run like words), `lstm` is matched to
xla_train's (mask_zero, so padding never changes the state). Step times come from `model.fit` itself, a callback
stamping each batch's end, so Keras's own loop is timed. --job quickstart runs README command 1's whole job on both
sides, alternating, on the same digits and splits (exported by xla_train): Keras's model.fit with validation and
the best checkpoint, its held-out test and five predictions, against `python -m xla_train recipe=quickstart`, each a
fresh process timed from start to exit, with its peak memory and held-out accuracy, and the floor of each runtime.
--seeds compares the held-out accuracy over seeds: one seed's 360 test digits cannot tell the two sides apart.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402  (after KERAS_BACKEND)
import jaxlib  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

# xla_train's parameter counts (sum of numel over the torch module's parameters, recipes' constructor arguments).
XLA_TRAIN_PARAMS = {"cnn": 1_676_912, "lstm": 1_300_769, "lstm_tutorial": 1_300_769}

# recipes/quickstart.yaml: CifarCNN(num_classes=10), Adam lr 1e-3, batch 32, DigitsDataModule's channel statistics.
CNN = {"batch": 32, "lr": 1e-3, "classes": 10, "dropout": 0.25, "dense_dropout": 0.5, "mean": 0.14, "std": 0.27}
# recipes/imdb.yaml: SentimentLSTM(10000, 128, 32), Adam lr 1e-3, batch 128, maxlen 500.
LSTM = {"batch": 128, "lr": 1e-3, "vocab": 10000, "embed": 128, "hidden": 32, "maxlen": 500}
SPE = (1, 8)  # steps_per_execution: Keras's default, then eight steps per compiled call
MODELS = ("cnn", "lstm", "lstm_tutorial")


def build_cnn(spe: int = 1) -> keras.Model:
    """models/cnn.py layer for layer; the uint8 -> normalised float step is a Rescaling layer, inside the step."""
    layers = keras.layers
    c = CNN
    inputs = keras.Input((32, 32, 3), dtype="uint8")
    x = layers.Rescaling(1.0 / (255.0 * c["std"]), offset=-c["mean"] / c["std"])(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Dropout(c["dropout"])(x)
    x = layers.BatchNormalization()(x)
    x = layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(64, 3, padding="valid", activation="relu")(x)  # 16x16 -> 14x14
    x = layers.MaxPooling2D(2)(x)
    x = layers.Dropout(c["dropout"])(x)
    x = layers.Flatten()(x)
    x = layers.Dense(512, activation="relu")(x)
    x = layers.Dropout(c["dense_dropout"])(x)
    outputs = layers.Dense(c["classes"])(x)  # logits, as CifarCNN returns
    model = keras.Model(inputs, outputs, name="cnn")
    model.compile(
        optimizer=keras.optimizers.Adam(c["lr"], epsilon=1e-8),  # torch.optim.Adam's epsilon
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        steps_per_execution=spe,
    )
    return model


def build_lstm(spe: int = 1, tutorial: bool = False) -> keras.Model:
    """models/lstm.py: padding id 0 is masked (mask_zero), the head reads the last real step's h, one logit. With
    `tutorial`, the Keras tutorial's model as written: no mask, a sigmoid output, Keras's default Adam."""
    layers = keras.layers
    c = LSTM
    inputs = keras.Input((c["maxlen"],), dtype="int32")
    x = layers.Embedding(c["vocab"], c["embed"], mask_zero=not tutorial)(inputs)
    x = layers.LSTM(c["hidden"])(x)
    outputs = layers.Dense(1, activation="sigmoid" if tutorial else None)(x)
    model = keras.Model(inputs, outputs, name="lstm_tutorial" if tutorial else "lstm")
    model.compile(
        optimizer=keras.optimizers.Adam(c["lr"], **({} if tutorial else {"epsilon": 1e-8})),
        loss=keras.losses.BinaryCrossentropy(from_logits=not tutorial),
        metrics=[keras.metrics.BinaryAccuracy(threshold=0.5 if tutorial else 0.0)],  # logit > 0 as xla_train counts
        steps_per_execution=spe,
    )
    return model


def synthetic(name: str, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if name == "cnn":
        x = rng.integers(0, 256, (rows, 32, 32, 3), dtype=np.uint8)
        y = rng.integers(0, CNN["classes"], (rows,), dtype=np.int32)
    else:
        x = rng.integers(2, LSTM["vocab"], (rows, LSTM["maxlen"]), dtype=np.int32)
        y = rng.integers(0, 2, (rows, 1)).astype(np.float32)
    return x, y


class Stamps(keras.callbacks.Callback):
    """perf_counter at the end of each execution (Keras calls on_train_batch_end once per steps_per_execution)."""

    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def on_train_begin(self, logs=None):
        self.times = [time.perf_counter()]

    def on_train_batch_end(self, batch, logs=None):
        # Keras has already read the logs to host floats; wait for the weight update too, so an interval is a step.
        state = getattr(self.model, "_jax_state", None)
        if state is not None:
            jax.block_until_ready(state)
        self.times.append(time.perf_counter())


def measure(name: str, spe: int, steps: int, warmup: int, seed: int) -> dict:
    """One fresh model, one fit of warm-up + timed steps; per timed execution, its time over its steps."""
    warm_exec = -(-warmup // spe)  # whole executions; the first holds the compile
    timed_exec = -(-steps // spe)
    keras.utils.set_random_seed(seed)
    model = build_cnn(spe) if name == "cnn" else build_lstm(spe, tutorial=name == "lstm_tutorial")
    batch = (CNN if name == "cnn" else LSTM)["batch"]
    total = (warm_exec + timed_exec) * spe
    x, y = synthetic(name, total * batch, np.random.default_rng(seed))
    stamps = Stamps()
    model.fit(x, y, batch_size=batch, epochs=1, steps_per_epoch=total, shuffle=False, verbose=0, callbacks=[stamps])
    intervals = np.diff(stamps.times)
    if len(intervals) != warm_exec + timed_exec:
        raise RuntimeError(f"expected {warm_exec + timed_exec} executions, stamped {len(intervals)}")
    step_s = [float(t) / spe for t in intervals[warm_exec:]]
    return {"step_s": step_s, "first_execution_s": float(intervals[0]), "model": model}


def param_counts(model: keras.Model) -> dict:
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    return {"count_params": model.count_params(), "trainable": trainable}


def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return {
        "keras": keras.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": keras.backend.backend(),
        "device": str(jax.devices()[0]),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


EXPORT = """
import sys, numpy as np
from xla_train.data.digits import DigitsDataModule
dm = DigitsDataModule()  # the quickstart's own digits, splits and seed
np.savez(sys.argv[1], **{f"{s}_{k}": a for s in ("train", "val", "test") for k, a in zip("xy", dm.arrays(s))})
"""
FLOORS = {  # an empty process of each runtime that has run one op: what no job on it can go below
    "keras floor": "import os; os.environ['KERAS_BACKEND'] = 'jax'; import keras, jax.numpy as jnp; (jnp.ones(4) + 1).block_until_ready()",
    "xla_train floor": "import torch, torch_xla, lightning; t = torch.ones(4).to(torch_xla.device()) + 1; torch_xla.sync(); t.cpu()",
    "xla_train jax floor": "import torch, torchax, lightning, jax.numpy as jnp; (jnp.ones(4) + 1).block_until_ready()",
    "torch floor": "import torch",  # the torch wheel's own share of both floors (PyPI's loads its CUDA libraries)
}
RUNTIMES = {"xla_train": (), "xla_train jax": ("runtime=jax",)}  # README command 1 (auto: torch_xla), then on JAX


def keras_quickstart(data: str, seed: int = 0) -> int:
    """README command 1's job in Keras: the CNN, 12 epochs at batch 32 on the digits, validated every epoch, the best
    epoch's weights restored, its held-out test accuracy and five predictions."""
    keras.utils.set_random_seed(seed)
    d = np.load(data)
    model = build_cnn()
    best = os.path.join(os.path.dirname(os.path.abspath(data)), f"best-{os.getpid()}.weights.h5")
    keep = keras.callbacks.ModelCheckpoint(
        best, monitor="val_sparse_categorical_accuracy", mode="max", save_best_only=True, save_weights_only=True
    )
    model.fit(
        d["train_x"],
        d["train_y"],
        batch_size=CNN["batch"],
        epochs=12,
        validation_data=(d["val_x"], d["val_y"]),
        callbacks=[keep],
        verbose=2,
    )
    model.load_weights(best)
    _, acc = model.evaluate(d["test_x"], d["test_y"], batch_size=CNN["batch"], verbose=0)
    probs = keras.ops.softmax(model.predict(d["test_x"][:5], verbose=0))
    print(json.dumps({"test_acc": float(acc), "predicted": np.asarray(probs).argmax(1).tolist()}))
    return 0


def timed(command: list[str], cwd: str, env: dict) -> dict:
    """One fresh process from start to exit: wall seconds, peak resident MB (GNU time), its output."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *command], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return {"wall_s": wall, "peak_mb": int(proc.stderr.strip().splitlines()[-1]) / 1024, "out": proc.stdout}


def whole_job(python: str, rounds: int, json_path: str | None, seeds: list[int]) -> int:
    """Both whole jobs, alternating, each in a fresh process and folder, with the runtimes' floors (at the first
    seed). Each seed other than the recipe's 0 draws both sides' initial weights, dropout and order afresh (the
    data's splits stay). A held-out test of 360 digits moves by a point with the seed alone, so accuracy is compared
    over several seeds: their means, spreads and the standard error of the difference of the means."""
    import re
    import tempfile

    work = tempfile.mkdtemp(prefix="quickstart-job-")
    user_env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "XLA_", "CPU_NUM_DEVICES", "PIP_"))}
    data = os.path.join(work, "digits.npz")
    subprocess.run([python, "-c", EXPORT, data], check=True, env=user_env)
    floors = {name: [sys.executable if name.startswith("keras") else python, "-c", c] for name, c in FLOORS.items()}
    runs: dict[str, list[dict]] = {name: [] for name in ("keras", *RUNTIMES, *floors)}
    for i, seed in enumerate(seeds):
        jobs = {
            "keras": [sys.executable, os.path.abspath(__file__), "--job-child", data, "--seed", str(seed)],
            **{
                side: [
                    python,
                    "-m",
                    "xla_train",
                    "recipe=quickstart",
                    *extra,
                    *([f"seed_everything={seed}"] if seed else []),
                ]
                for side, extra in RUNTIMES.items()
            },
            **(floors if i == 0 else {}),
        }
        for r in range(rounds):
            for name in list(jobs) if r % 2 == 0 else list(jobs)[::-1]:
                cwd = tempfile.mkdtemp(dir=work)
                env = {**user_env, "KERAS_BACKEND": "jax"} if name.startswith("keras") else user_env
                run = {"seed": seed, **timed(jobs[name], cwd, env)}
                if name == "keras":
                    run["test_acc"] = json.loads(run["out"].strip().splitlines()[-1])["test_acc"]
                elif name in RUNTIMES:
                    run["test_acc"] = float(re.search(r"held-out test accuracy: ([\d.]+)", run["out"]).group(1))
                    run["time_line"] = run["out"].strip().splitlines()[-1]
                runs[name].append({k: v for k, v in run.items() if k != "out"})
                print(
                    f"seed {seed} round {r + 1} {name:16s} {run['wall_s']:6.1f} s  {run['peak_mb']:6.0f} MB  "
                    f"{run.get('test_acc', '')}  {run.get('time_line', '')}",
                    flush=True,
                )
    rows = {
        n: {
            "wall_s": statistics.median(x["wall_s"] for x in v),
            "peak_mb": max(x["peak_mb"] for x in v),
            "test_acc": [x.get("test_acc") for x in v],
            "runs": v,
        }
        for n, v in runs.items()
    }
    ratio = rows["xla_train"]["wall_s"] / rows["keras"]["wall_s"]
    for side in RUNTIMES:
        wall, peak = (rows[side][k] / rows["keras"][k] for k in ("wall_s", "peak_mb"))
        print(f"# {side} / keras whole job: {wall:.2f}x wall (medians of {len(seeds) * rounds}), {peak:.2f}x peak RSS")
    summary = {"machine": machine(), "job": "quickstart", "seeds": seeds, "rounds": rounds, "results": rows}
    summary["ratio"] = ratio
    if len(seeds) > 1:
        summary["accuracy"] = accuracy_over_seeds({n: runs[n] for n in ("keras", "xla_train")})
    if json_path:
        with open(json_path, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    return 0


def accuracy_over_seeds(runs: dict[str, list[dict]]) -> dict:
    """Each side's held-out accuracy per seed (rounds of a seed repeat it), their mean, standard deviation and
    median, and xla_train's mean minus Keras's with its standard error. The seeds are not paired: the two sides
    draw different weights from the same number."""
    per_seed = {n: {r["seed"]: r["test_acc"] for r in v} for n, v in runs.items()}
    out: dict = {n: {"by_seed": a} for n, a in per_seed.items()}
    for n, a in per_seed.items():
        values = list(a.values())
        out[n].update(mean=statistics.mean(values), sd=statistics.stdev(values), median=statistics.median(values))
    k, x = out["keras"], out["xla_train"]
    diff = x["mean"] - k["mean"]
    se = (k["sd"] ** 2 / len(per_seed["keras"]) + x["sd"] ** 2 / len(per_seed["xla_train"])) ** 0.5
    out["xla_train_minus_keras"] = {"mean": diff, "se": se}
    for n in ("keras", "xla_train"):
        o = out[n]
        print(
            f"# {n:9s} held out over {len(o['by_seed'])} seeds: mean {o['mean']:.2%}, sd {o['sd']:.2%}, "
            f"median {o['median']:.2%}",
            flush=True,
        )
    print(f"# xla_train - keras: {diff * 100:+.2f} points (standard error {se * 100:.2f})", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=(*MODELS, "all"), default="all")
    p.add_argument("--job", choices=("quickstart",), help="the whole job on both sides instead of step times")
    p.add_argument("--xla-train-python", help="--job: the project's python (its venv), which runs xla_train")
    p.add_argument("--job-child", help=argparse.SUPPRESS)  # the Keras job itself, in a process of its own
    p.add_argument("--steps", type=int, default=24, help="timed steps per configuration (at least 24)")
    p.add_argument("--warmup", type=int, default=8, help="untimed steps first, the compile among them (at least 8)")
    p.add_argument("--rounds", type=int, default=1, help="repeats; each round runs the configurations in turned order")
    p.add_argument("--json", metavar="PATH", help="also write the JSON summary here")
    p.add_argument("--seed", type=int, default=0, help="--job: both sides' seed (the recipe's is 0)")
    p.add_argument("--seeds", type=int, help="--job: seeds --seed, --seed+1, ... this many, each for --rounds")
    a = p.parse_args(argv)
    if a.steps < 24 or a.warmup < 8 or a.rounds < 1:
        p.error("--steps must be >= 24, --warmup >= 8, --rounds >= 1")
    if a.job_child:
        return keras_quickstart(a.job_child, a.seed)
    if a.job:
        if not a.xla_train_python:
            p.error("--job needs --xla-train-python (the project venv's python, e.g. .venv/bin/python)")
        if a.seeds is not None and a.seeds < 1:
            p.error("--seeds must be >= 1")
        seeds = list(range(a.seed, a.seed + (a.seeds or 1)))
        return whole_job(os.path.abspath(a.xla_train_python), a.rounds, a.json, seeds)

    info = machine()
    print(
        f"# keras {info['keras']} (backend {info['backend']}), jax {info['jax']}, jaxlib {info['jaxlib']}; "
        f"{info['cpu']}, {info['cores']} cores; {info['date_utc']}",
        flush=True,
    )
    names = MODELS if a.model == "all" else (a.model,)
    results = []
    for name in names:
        batch = (CNN if name == "cnn" else LSTM)["batch"]
        steps: dict[int, list[float]] = {spe: [] for spe in SPE}
        rounds: dict[int, list[float]] = {spe: [] for spe in SPE}
        compiles: dict[int, list[float]] = {spe: [] for spe in SPE}
        counts = None
        for r in range(a.rounds):
            for spe in SPE if r % 2 == 0 else SPE[::-1]:
                m = measure(name, spe, a.steps, a.warmup, seed=r)
                steps[spe] += m["step_s"]
                rounds[spe].append(statistics.median(m["step_s"]))
                compiles[spe].append(m["first_execution_s"])
                counts = counts or param_counts(m["model"])
        print(
            f"# {name}: keras count_params {counts['count_params']:,} (trainable {counts['trainable']:,}); "
            f"xla_train {XLA_TRAIN_PARAMS[name]:,}",
            flush=True,
        )
        for spe in SPE:
            med = statistics.median(steps[spe])
            row = {
                "model": name,
                "steps_per_execution": spe,
                "batch": batch,
                "median_ms_per_step": med * 1e3,
                "samples_per_s": batch / med,
                "timed_steps": len(steps[spe]) * spe,
                "timed_executions": len(steps[spe]),
                "round_medians_ms": [t * 1e3 for t in rounds[spe]],
                "first_execution_s": compiles[spe],
                **{f"params_{k}": v for k, v in counts.items()},
                "params_xla_train": XLA_TRAIN_PARAMS[name],
            }
            results.append(row)
            print(
                f"{name:4s} spe={spe}: {row['median_ms_per_step']:8.2f} ms/step  {row['samples_per_s']:9.1f} samples/s"
                f"  (batch {batch}, median of {row['timed_executions']} executions = {row['timed_steps']} steps)",
                flush=True,
            )
    summary = {"machine": info, "args": vars(a), "results": results}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
