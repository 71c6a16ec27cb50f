"""The first training step of the IMDB recipe's LSTM size (Embedding 10,000 x 128, LSTM 32, batch 128) on torch_xla
with torch's own `nn.LSTM`, which torch_xla traces as one set of ops per time step: the program, and its compile,
grow with maxlen. This is why xla_train runs a recurrent layer as a scan on XLA (runtime/layers/scan_rnn.py), whose
compile stays flat (`bench lstm`). docs/results.md, "Compile time against maxlen":

    python xla_train/bench/peers/lstm_unrolled_compile.py --csv FILE [maxlens, default 25,50]

One process, each maxlen's step (forward, backward, SGD with momentum) traced, compiled and run, three times: the
third runs the second's program again, so it shows the step itself; PJRT_DEVICE=CPU unless set. A peer
measurement, not an xla_train command.
"""

from __future__ import annotations

import os
import sys
import time

from xla_train.bench import report

COMMAND = report.peer_invocation(__file__, sys.argv[1:])  # before torch_xla adds its flags
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402
from torch import nn  # noqa: E402

BATCH, VOCAB, EMBED, HIDDEN = 128, 10_000, 128, 32


class UnrolledLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, ids):
        _, (h, _) = self.lstm(self.embedding(ids))
        return self.head(h[-1]).squeeze(-1)


def compile_seconds() -> float:
    """XLA compile time so far in this process (torch_xla's CompileTime metric: count, total ns, samples)."""
    data = met.metric_data("CompileTime")
    return data[1] / 1e9 if data else 0.0


def step_seconds(maxlen: int) -> dict:
    device = torch_xla.device()
    torch.manual_seed(0)
    net = UnrolledLSTM().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)  # no step count in the program, unlike Adam's
    ids = torch.randint(1, VOCAB, (BATCH, maxlen)).to(device)
    labels = torch.randint(0, 2, (BATCH,)).float().to(device)
    times, compiled = [], []
    for _ in range(3):  # the second step also creates the momentum buffers: a program of its own
        before, t0 = compile_seconds(), time.perf_counter()
        opt.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(net(ids), labels).backward()
        opt.step()
        torch_xla.sync()
        xm.wait_device_ops()
        times.append(time.perf_counter() - t0)
        compiled.append(compile_seconds() - before)
    return {
        "maxlen": maxlen,
        "first_step_s": round(times[0], 2),
        "compile_s": round(compiled[0], 2),
        "third_step_s": round(times[2], 3),
        "third_compile_s": round(compiled[2], 2),
    }


def main(argv: list[str]) -> int:
    out, argv = report.peer_args(argv)
    maxlens = [int(m) for m in argv[0].split(",")] if argv else [25, 50]
    rows = []
    for maxlen in maxlens:
        rows.append(step_seconds(maxlen))
        print(rows[-1], flush=True)
    if out is not None:
        report.write_csv(out, rows, list(rows[0]), report.provenance(COMMAND, ["XLA:CPU, torch_xla"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
