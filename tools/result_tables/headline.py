"""results.md's headline table and the README's performance table, as blocks too: each row a claim its subject's module
computes from the CSVs its section is generated from, so a figure a page claims cannot outlive the measurement behind
it."""

from __future__ import annotations

import re

from result_tables import eager_cpu, fast_path, lstm, peers, runs, serving, xla_cpu, xla_steps
from result_tables.csvs import ROOT, read


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


CLAIMS = [
    peers.gpu_claim,
    peers.runtimes_claim,
    runs.command1_claim,
    peers.keras_steps_claim,
    peers.keras_job_claim,
    eager_cpu.own_net_claim,
    xla_steps.auto_k_claim,
    xla_steps.k_steps_claim,
    xla_steps.k_up_to_32_claim,
    xla_steps.tpu_estimate_claim,
    peers.overhead_claim,
    eager_cpu.accelerator_claim,
    lstm.lstm_maxlen_claim,
    xla_steps.replicas_claim,
    xla_cpu.huge_pages_claim,
    runs.batch_curves_claim,
    lstm.tokenise_claim,
    fast_path.fast_path_claim,
    fast_path.payback_claim,
    fast_path.quickstart_cpu_claim,
    lstm.lstm_off_xla_claim,
    serving.serving_forms_claim,
    serving.serving_load_claim,
    xla_steps.sharding_call_claim,
    runs.suite_claim,
]
# The README's performance table: at most 8 rows, each a claim above in its shorter wording.
README = [
    runs.command1_claim,
    peers.keras_job_claim,
    peers.keras_steps_claim,
    peers.gpu_claim,
    peers.runtimes_claim,
    lstm.lstm_maxlen_claim,
    peers.overhead_claim,
    serving.serving_load_claim,
]


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
