"""What `devices` prints, and how a runtime answers without starting itself in this process.

`python -m xla_train devices` is the first command on a new machine (and the benchmarks notebook's first cell): it
should answer in the time a runtime takes to start, not in the time Lightning and its imports take, and on a TPU it
must not hold the chips that the next process will train on. So each runtime counts its devices in a short-lived
process, and neither process imports Lightning.
"""

from __future__ import annotations

from dataclasses import dataclass

from xla_train.errors import HardwareError


@dataclass(frozen=True)
class DeviceReport:
    accelerator: str  # what to pass as accelerator=
    hardware: str
    names: tuple[str, ...]
    detail: str
    runtime: str = ""  # the runtime that sees them, by its registry name
    also: tuple = ()  # the other installed runtimes' reports, or why each has none (a str)

    @property
    def count(self) -> int:
        return len(self.names)

    def __str__(self) -> str:
        n = self.count
        lines = [f"{n} {self.hardware} device{'s' if n != 1 else ''} (accelerator={self.accelerator}; {self.detail})"]
        lines += [f"  {name}  {self.hardware}" for name in self.names]
        return "\n".join(lines + [str(other) for other in self.also])


def listed(script: str, what: str) -> dict:
    """The last JSON line a short-lived process prints (it starts the runtime, so this process does not)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise HardwareError(f"{what} did not start ({tail})")
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise HardwareError(answer["error"])
    return answer
