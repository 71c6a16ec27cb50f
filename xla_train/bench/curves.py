"""`bench curves`: real training at each batch size, and validation accuracy per epoch, as the tutorials plot it.

At the recipe's learning rate a large batch takes fewer steps per epoch and converges more slowly, which only
real training shows. So this runs `fit` itself (one process per batch size, one seed) on the recipe's real
data, and each curve is what a user's run logs; the fits' folders stay under fits/ (docs/results.md,
"bench predict, curves and text").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from jsonargparse.typing import PositiveFloat, PositiveInt

from xla_train.bench import charts, report
from xla_train.bench.sweep import Accelerator, DeviceCount
from xla_train.bench.cell import run_logged
from xla_train.training.run_folder import RunFolder
from xla_train.config.build import build_parts
from xla_train.data.base import check_batch_size
from xla_train.runtime.registry import backend_for, runtime_started
from xla_train.training.metrics_log import epoch_history

METRICS = ("train_loss", "train_acc", "val_loss", "val_acc", "train_seconds")


def epoch_metrics(metrics_csv: Path) -> dict[int, dict]:
    """metrics.csv -> {epoch: {metric: value}} for the metrics the curves report."""
    rows, _ = epoch_history(metrics_csv)
    return {r["epoch"]: {k: r[k] for k in METRICS if k in r} for r in rows}


def fit_hardware(log_text: str) -> str | None:
    """What the fit ran on, from the line RunReport prints: "run folder: ... (accelerator xla, 1 device(s))"."""
    m = re.search(r"\(accelerator (\w+), (\d+) device\(s\)\)", log_text)
    if m is None:
        return None
    setting = backend_for(m[1]).runtime_setting()
    pjrt = f" ({setting})" if setting else ""
    return f"fit on accelerator {m[1]}{pjrt}, {m[2]} device(s)"


def run_fit(opts: dict, batch: int, folder: Path) -> tuple[dict[int, dict], str | None, str | None]:
    """One real `fit` at this batch size; (its per-epoch metrics, an error line or None, what it ran on)."""
    args = [
        f"recipe={opts['recipe']}",
        f"batch_size={batch}",
        f"runs_dir={folder}",
        "test_after_fit=false",
        "predict_samples=0",
        "logger=csv",
        *(f"{k}={v}" for k, v in opts["overrides"].items()),
    ]
    args += [f"{k}={opts[k]}" for k in ("epochs", "accelerator", "devices") if opts[k]]
    folder.mkdir(parents=True, exist_ok=True)
    log = folder.with_suffix(".log")
    accelerator = opts["accelerator"]  # None: the recipe's, which may hold the runtime
    if (accelerator is None or backend_for(accelerator).exclusive_runtime) and runtime_started():
        return _fit_here(args, folder, log)
    code = run_logged(["-m", "xla_train", "fit", *args], log, opts["timeout"])
    if code is None:
        return {}, f"did not finish in {opts['timeout']:g} s (timeout=)", None
    found = RunFolder.under(folder)
    if code != 0 or not found:
        lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
        return {}, (lines[-1] if lines else f"exit code {code}") + f" (log: {log})", None
    return epoch_metrics(found[-1].metrics), None, fit_hardware(log.read_text())


def curves(
    recipe: str,
    batch_sizes: list[PositiveInt] = [32, 128, 512],
    epochs: Optional[PositiveInt] = None,
    accelerator: Optional[Accelerator] = None,
    devices: Optional[DeviceCount] = None,
    timeout: PositiveFloat = 7200.0,
    runs_dir: str = "runs",
    overrides: Optional[dict] = None,
    command: str = "",
) -> tuple[int, Path]:
    from tqdm import tqdm

    opts = dict(locals())
    opts["overrides"] = dict(overrides or {})
    for b in batch_sizes:
        check_batch_size(b)
    build_parts(recipe, opts["overrides"])  # bad recipes and keys fail here, once
    run_dir = report.new_run_dir(runs_dir)
    rows, failed, hardware = [], [], set()
    bar = tqdm(opts["batch_sizes"], desc="curves", unit="fit", disable=None)
    for batch in bar:
        bar.set_postfix_str(f"batch {batch}")
        per_epoch, error, ran_on = run_fit(opts, batch, run_dir / "fits" / f"b{batch}")
        if error:
            failed.append((batch, error))
            bar.write(f"batch {batch:>5}: failed: {error}")
            continue
        hardware.add(ran_on or "fit on an unreported accelerator")
        rows += [{"batch": batch, "epoch": e, **m} for e, m in sorted(per_epoch.items())]
        last = per_epoch[max(per_epoch)] if per_epoch else {}
        bar.write(f"batch {batch:>5}: final val_acc {last.get('val_acc', float('nan')):.4f}")
    bar.close()
    if not rows:
        print("no fit finished; see the logs under " + str(run_dir / "fits"))
        return 1, run_dir
    prov = report.provenance(opts["command"], sorted(hardware))
    batches = sorted({r["batch"] for r in rows})
    epochs = sorted({r["epoch"] for r in rows})
    acc = {(r["batch"], r["epoch"]): r.get("val_acc") for r in rows}
    headers = ["epoch", *(f"batch {b}" for b in batches)]
    table = [[e + 1, *("-" if acc.get((b, e)) is None else f"{acc[(b, e)]:.4f}" for b in batches)] for e in epochs]
    train_s = {b: sum(r.get("train_seconds", 0.0) for r in rows if r["batch"] == b) for b in batches}
    table.append(["train s", *(report.fmt(train_s[b], 1) for b in batches)])
    notes = [
        f"recipe {opts['recipe']}"
        + "".join(f", {k}={v}" for k, v in opts["overrides"].items())
        + "; the recipe's learning rate at every batch size; the recipe's real data",
        "each cell: validation accuracy at the end of the epoch, from the fit's own metrics.csv (fits/); "
        "train s: the fit's training time over all epochs (the first includes compilation on XLA)",
    ]
    notes += [f"batch {b} failed: {e}" for b, e in failed]
    made = charts.curves_chart(run_dir, rows, prov, f"{opts['recipe']}: validation accuracy by epoch and batch size")
    report.publish(
        run_dir,
        "curves",
        f"xla_train bench curves: {opts['recipe']}",
        prov,
        rows,
        ["batch", "epoch", *METRICS],
        headers,
        table,
        notes,
        made,
        caption="validation accuracy by epoch:",
    )
    return (0 if not failed else 1), run_dir


def _fit_here(args: list[str], folder: Path, log: Path) -> tuple[dict[int, dict], str | None, str | None]:
    """The fit in this process, which holds the XLA runtime (on a TPU its chips: a subprocess could not get
    them, runtime/tpu_lock.py); its output goes to the log as a subprocess's would."""
    import contextlib

    from xla_train.config.build import run_lightning
    from xla_train.config.run_spec import RunSpec
    from xla_train.errors import UserError

    pairs = dict(a.split("=", 1) for a in args)
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            run_lightning(RunSpec.parse("fit", pairs))
            error = None
        except UserError as e:
            error = f"xla_train: error: {e}"
        except Exception as e:  # recorded in the table, as a failed subprocess's last line would be
            error = f"{type(e).__name__}: {e}"
    found = RunFolder.under(folder)
    if error or not found:
        return {}, f"{error or 'no metrics written'} (log: {log})", None
    return epoch_metrics(found[-1].metrics), None, fit_hardware(log.read_text())
