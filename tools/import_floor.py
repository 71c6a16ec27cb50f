"""What a process holds before it trains anything: the imports under xla_train's memory floor, each step a fresh
process, so that the whole job's peak against Keras's (docs/results.md, "The whole quickstart job") can be read as
what is the stack's and what is xla_train's own.

Each step imports what the step before did and one thing more, and reports the process's peak resident memory
over its whole life, its exit included (as /usr/bin/time reads it), the peak before its exit, and how much of its
memory at the end is anonymous and how much file pages. "torch's CUDA libraries alone" loads, in a bare
interpreter, the NVIDIA libraries that `import torch` maps in this environment (none on a CPU wheel).

    PJRT_DEVICE=CPU python tools/import_floor.py docs/results/import-floor.csv [--rounds 2]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

READ = """
import json, sys
def kib(path, key):
    for line in open(path):
        if line.startswith(key):
            return int(line.split()[1])
mods = ("torchvision", "torchmetrics", "matplotlib", "sympy", "torch._dynamo", "jax", "torch_xla")
print(json.dumps({"peak_mib": kib("/proc/self/status", "VmHWM:") / 1024,
                  "anon_mib": kib("/proc/self/smaps_rollup", "Anonymous:") / 1024,
                  "rss_mib": kib("/proc/self/status", "VmRSS:") / 1024,
                  "loaded": [m for m in mods if m in sys.modules]}))
"""
CUDA_LIBS = """
import ctypes
for path in {libs!r}:
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
"""
MAPPED = """
import torch
print("\\n".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "/nvidia/" in l and ".so" in l})))
"""
FIRST_OP = """
t = torch.ones(4).to(torch_xla.device()) + 1
torch_xla.sync()
t.cpu()
"""
STEPS = [  # (name, code): each step runs the code of every step above it too
    ("python", ""),
    ("torch", "import torch"),
    ("+ torch._dynamo (torch_xla imports it)", "import torch._dynamo"),
    ("+ lightning.pytorch", "import lightning.pytorch"),
    ("+ torch_xla", "import torch_xla"),
    ("+ torch_xla's first op", FIRST_OP),
    ("+ xla_train's fit path", "import xla_train.config.lightning_cli, xla_train.runtime.torch_xla.strategy"),
]


def measure(code: str) -> dict:
    """The step's own figures, and its peak over the whole process, its exit included, as /usr/bin/time reads it
    (the kernel's high-water mark as the parent collects the child): a process can peak as it shuts down."""
    child = subprocess.Popen([sys.executable, "-c", code + READ], stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"the step exited {child.returncode}: {code!r}")
    return {**json.loads(out.strip().splitlines()[-1]), "exit_peak_mib": usage.ru_maxrss / 1024}


def rows(rounds: int) -> list[dict]:
    libs = subprocess.run([sys.executable, "-c", MAPPED], capture_output=True, text=True, check=True).stdout.split()
    steps = [("torch's CUDA libraries alone", CUDA_LIBS.format(libs=libs), False)]
    code = ""
    for name, more in STEPS:
        code += more + "\n"
        steps.append((name, code, True))
    out = []
    for n in range(1, rounds + 1):
        for name, step_code, _ in steps:
            got = measure(step_code)
            out.append(
                {
                    "step": name,
                    "round": n,
                    "peak_mib": round(got["exit_peak_mib"]),
                    "peak_before_exit_mib": round(got["peak_mib"]),
                    "anon_mib": round(got["anon_mib"]),
                    "file_mib": round(got["rss_mib"] - got["anon_mib"]),
                    "loaded": " ".join(got["loaded"]),
                }
            )
            print(out[-1], flush=True)
    return out


def cpu() -> str:
    info = dict(
        line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line and line[0] != " "
    )
    info = {k.strip(): v.strip() for k, v in info.items()}
    has = set(info.get("flags", "").split())
    named = {"avx512f": "AVX-512", "avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX-BF16"}
    extras = ", ".join(v for k, v in named.items() if k in has)
    return f"{info.get('model name', platform.processor())} ({extras or 'no AVX-512'}), {os.cpu_count()} core(s)"


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    found = rows(args.rounds)
    names = ("torch", "torch_xla", "lightning", "torchmetrics", "torchvision", "matplotlib", "jax")
    buf = io.StringIO()
    pjrt = os.environ.get("PJRT_DEVICE", "")
    buf.write(f"# command: PJRT_DEVICE={pjrt} python tools/import_floor.py {args.out} --rounds {args.rounds}\n")
    buf.write(f"# hardware: {cpu()}; memory is measured, not time, so other work beside it does not move it\n")
    buf.write(f"# versions: Python {platform.python_version()}; {', '.join(f'{n} {version(n)}' for n in names)}\n")
    buf.write(f"# date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
    writer = csv.DictWriter(buf, fieldnames=list(found[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(found)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(buf.getvalue())
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
