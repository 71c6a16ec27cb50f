"""`bench predict`: how fast a checkpoint serves on a plain CPU, at batch 1 (latency) and batch 256 (throughput).

    python -m xla_train bench predict ckpt=runs/quickstart/version_0/checkpoints/last.ckpt [threads=4]

What is timed is what a server runs: the unreplicated nn.Module from
`load_for_inference` (no Lightning, no torch_xla), in eval mode under
no_grad, in this process. Two rows each: the net alone on ready tensors, and
end to end from raw inputs (resizing and normalising images; tokenising text)
to probabilities. Inputs are synthetic, shaped like real ones: random uint8
images at the checkpoint's size, or reviews with aclImdb's length distribution.
Untimed warm-up calls come first, and the two rows' calls alternate, so that a
slow spell on a shared machine falls on both; latency is the median and 95th
percentile of `repeats` calls, throughput the median of repeats/10 (at least 5)
batches.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from jsonargparse.typing import PositiveInt

from xla_train.bench import report
from xla_train.bench.data import synthetic_reviews
from xla_train.bench.timing import percentile, time_calls
from xla_train.serve.predictor import load_for_inference


def raw_inputs(predictor, n: int):
    import numpy as np

    if predictor.kind == "text":
        return synthetic_reviews(n)
    s = int(predictor.info["image_size"])
    return np.random.default_rng(0).integers(0, 256, (n, s, s, 3), dtype=np.uint8)


def predict(ckpt: str, batch_size: PositiveInt = 256, repeats: PositiveInt = 100,
            threads: Optional[PositiveInt] = None, runs_dir: str = "runs", command: str = "") -> tuple[int, Path]:
    import torch

    if threads:
        torch.set_num_threads(threads)
    predictor = load_for_inference(ckpt)
    batch = batch_size
    raw = raw_inputs(predictor, batch)
    x = predictor.preprocess(raw)
    net = predictor.model.eval()

    def net_only(k):
        def run():
            with torch.no_grad():
                return net(x[:k])
        return run

    def end_to_end(k):
        one = raw[:k]
        return lambda: predictor.probabilities(one, batch_size=k)

    rows = []
    modes = (("net only", net_only), ("end to end", end_to_end))
    latencies = time_calls([make(1) for _, make in modes], repeats, warmup=10)
    batches = time_calls([make(batch) for _, make in modes], max(5, repeats // 10), warmup=2)
    for (what, _), lat, big in zip(modes, latencies, batches):
        rows.append({"what": what, "latency_ms_median": statistics.median(lat) * 1e3,
                     "latency_ms_p95": percentile(lat, 0.95) * 1e3, "batch": batch,
                     "batch_ms_median": statistics.median(big) * 1e3,
                     "samples_per_s": batch / statistics.median(big), "repeats": repeats})
    arch = f"{predictor.info['arch']} {predictor.info.get('config', {})}"
    threads = torch.get_num_threads()
    prov = report.provenance(command, [f"CPU, eager PyTorch, {threads} thread(s)"])
    run_dir = report.new_run_dir(runs_dir)
    columns = ["what", "latency_ms_median", "latency_ms_p95", "batch", "batch_ms_median", "samples_per_s", "repeats"]
    report.write_csv(run_dir / "predict.csv", rows, columns, prov)
    headers = ["", "batch 1 median ms", "batch 1 p95 ms", f"batch {batch} ms", f"batch {batch} samples/s"]
    table = [[r["what"], report.fmt(r["latency_ms_median"], 2), report.fmt(r["latency_ms_p95"], 2),
              report.fmt(r["batch_ms_median"], 1), report.fmt(r["samples_per_s"], 0)] for r in rows]
    inputs = "synthetic reviews" if predictor.kind == "text" else f"random {predictor.info['image_size']}px images"
    notes = [f"checkpoint {ckpt}: {arch}", f"inputs: {inputs}; {repeats} timed calls at batch 1 after 10 "
             f"warm-up calls; median of {max(5, repeats // 10)} batches of {batch}",
             "end to end = preprocessing + net + softmax, as `python -m xla_train predict` runs it"]
    (run_dir / "predict.md").write_text(report.markdown("xla_train CPU inference", prov, headers, table, notes))
    report.show(prov, notes, headers, table, run_dir, ["predict.csv", "predict.md"])
    return 0, run_dir
