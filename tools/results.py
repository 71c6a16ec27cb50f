"""Writes the tables of docs/results.md, and the README's performance table, from the CSVs in docs/results/, so that
a figure on a page is the figure a command wrote, with that command's provenance beside it.

A generated block sits between `<!-- results: NAME -->` and `<!-- /results -->`; everything else on a page is
prose and stays as written. Each NAME is a function in tools/tables/ that reads its CSVs (a `bench` CSV, or a peer
script's summary) and returns Markdown. `python tools/results.py` rewrites the pages; `--check` exits 1 when a
committed page differs from what it would write (tests/test_results_page.py runs that in CI).

    python tools/results.py            # rewrite the generated blocks of docs/results.md and README.md
    python tools/results.py --check    # 0 when the pages match their CSVs, else 1 and the blocks that differ
"""

from __future__ import annotations

import argparse
import re
import sys

from result_tables import eager_cpu, fast_path, headline, kernels, lstm, peers, runs, serving, xla_cpu, xla_steps
from result_tables.csvs import ROOT

PAGE = ROOT / "docs" / "results.md"
PAGES = (PAGE, ROOT / "README.md")
BLOCK = re.compile(r"(<!-- results: ([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)


TABLES = {
    "headline": headline.headline,
    "performance": headline.performance,
    "command1": runs.command1,
    "command1-output": runs.command1_output,
    "suite": runs.suite,
    "ci-runs": runs.ci_runs,
    "gpu": peers.gpu,
    "gpu-chunks": peers.gpu_chunks,
    "runtimes": peers.runtimes,
    "runtimes-commands": peers.runtimes_commands,
    "kernels-imdb": kernels.kernels_imdb,
    "overhead": peers.overhead,
    "overhead-settings": peers.overhead_settings,
    "keras-steps": peers.keras_steps,
    "keras-job": peers.keras_job,
    "import-floor": runs.import_floor,
    "accelerator": eager_cpu.accelerator,
    "serving-forms": serving.serving_forms,
    "serving-load": serving.serving_load,
    "batch-curves": runs.batch_curves,
    "replicas": xla_steps.replicas,
    "xla-flags": xla_cpu.xla_flags,
    "jax-level": xla_cpu.jax_level,
    "jax-compile": xla_cpu.jax_compile,
    "page-faults": xla_cpu.page_faults,
    "huge-pages": xla_cpu.huge_pages,
    "tpu-estimate": xla_steps.tpu_estimate,
    "lstm-off-xla": lstm.lstm_off_xla,
    "sharding-call": xla_steps.sharding_call,
    "lstm-unrolled": lstm.lstm_unrolled,
    "fastpath-nobf16": eager_cpu.fastpath_nobf16,
    "fastpath-bf16-cnn": fast_path.fastpath_bf16_cnn,
    "fastpath-bf16-resnet": fast_path.fastpath_bf16_resnet,
    "bf16-profile": fast_path.bf16_profile,
    "payback": fast_path.payback,
    "quickstart-cpu": fast_path.quickstart_cpu,
    "inductor-cache": fast_path.inductor_cache,
    "tokenise": lstm.tokenise,
    "k-steps": xla_steps.k_steps,
    "lstm-maxlen": lstm.lstm_maxlen,
    "own-net": eager_cpu.own_net,
    "own-net-gpu": eager_cpu.own_net_gpu,
    "k-up-to-32": xla_steps.k_up_to_32,
    "while-loop": xla_steps.while_loop,
    "auto-k": xla_steps.auto_k,
}


def render(page: str, name: str = "docs/results.md") -> str:
    def fill(m: re.Match) -> str:
        table = m.group(2)
        if table not in TABLES:
            raise SystemExit(f"{name} names a table {table!r} that tools/results.py has not: {sorted(TABLES)}")
        return m.group(1) + TABLES[table]() + m.group(4)

    return BLOCK.sub(fill, page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs from what its CSVs write")
    args = parser.parse_args(argv)
    stale = []
    for path in PAGES:
        name = str(path.relative_to(ROOT))
        page = path.read_text()
        written = render(page, name)
        if not args.check:
            path.write_text(written)
            continue
        blocks = zip(BLOCK.finditer(page), BLOCK.finditer(written))
        stale += [f"{name}: {m.group(2)}" for m, n in blocks if m.group(0) != n.group(0)]
    if stale:
        print(f"generated blocks out of date: {'; '.join(stale)}; run python tools/results.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
