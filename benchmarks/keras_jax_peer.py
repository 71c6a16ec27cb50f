"""Keras 3 on JAX training the same two nets, so xla_train's step time can be quoted as a ratio to a peer.

Both sides hand the step to XLA; what differs is the framework around it, which is what docs/results.md compares.
This is a peer measurement, not part of the package or its tests: it needs Keras and JAX, which xla_train does not,
so it runs in its own virtual environment, never the project's:

    python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install 'keras>=3.10,<4' 'jax[cpu]'
    /tmp/kvenv/bin/python benchmarks/keras_jax_peer.py --model all --steps 24 --warmup 8 --rounds 1

The data are synthetic, of the recipes' shapes and dtypes: a step's cost does not depend on the values (the token
ids are uniform over [2, 10000), so no review is padded, but the masked LSTM path still runs as xla_train's does).
Step times come from `model.fit` itself, a callback stamping each batch's end, so Keras's own loop is timed.
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
XLA_TRAIN_PARAMS = {"cnn": 1_676_912, "lstm": 1_300_769}

# recipes/quickstart.yaml: CifarCNN(num_classes=10), Adam lr 1e-3, batch 32, DigitsDataModule's channel statistics.
CNN = {"batch": 32, "lr": 1e-3, "classes": 10, "dropout": 0.25, "dense_dropout": 0.5, "mean": 0.14, "std": 0.27}
# recipes/imdb.yaml: SentimentLSTM(10000, 128, 32), Adam lr 1e-3, batch 128, maxlen 500.
LSTM = {"batch": 128, "lr": 1e-3, "vocab": 10000, "embed": 128, "hidden": 32, "maxlen": 500}
SPE = (1, 8)  # steps_per_execution: Keras's default, then eight steps per compiled call


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


def build_lstm(spe: int = 1) -> keras.Model:
    """models/lstm.py: padding id 0 is masked (mask_zero), the head reads the last real step's h."""
    layers = keras.layers
    c = LSTM
    inputs = keras.Input((c["maxlen"],), dtype="int32")
    x = layers.Embedding(c["vocab"], c["embed"], mask_zero=True)(inputs)
    x = layers.LSTM(c["hidden"])(x)
    outputs = layers.Dense(1)(x)  # one logit
    model = keras.Model(inputs, outputs, name="lstm")
    model.compile(
        optimizer=keras.optimizers.Adam(c["lr"], epsilon=1e-8),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy(threshold=0.0)],  # logit > 0, as xla_train counts it
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
    model = build_cnn(spe) if name == "cnn" else build_lstm(spe)
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("cnn", "lstm", "all"), default="all")
    p.add_argument("--steps", type=int, default=24, help="timed steps per configuration (at least 24)")
    p.add_argument("--warmup", type=int, default=8, help="untimed steps first, the compile among them (at least 8)")
    p.add_argument("--rounds", type=int, default=1, help="repeats; each round runs the configurations in turned order")
    p.add_argument("--json", metavar="PATH", help="also write the JSON summary here")
    a = p.parse_args(argv)
    if a.steps < 24 or a.warmup < 8 or a.rounds < 1:
        p.error("--steps must be >= 24, --warmup >= 8, --rounds >= 1")

    info = machine()
    print(
        f"# keras {info['keras']} (backend {info['backend']}), jax {info['jax']}, jaxlib {info['jaxlib']}; "
        f"{info['cpu']}, {info['cores']} cores; {info['date_utc']}",
        flush=True,
    )
    names = ("cnn", "lstm") if a.model == "all" else (a.model,)
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
