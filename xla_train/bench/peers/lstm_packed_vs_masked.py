"""One eager CPU training step of the IMDB recipe's LSTM in the masked form xla_train trains (models/lstm.py), against
the same net reading a packed sequence, the usual PyTorch way to skip padding. The masked form moves each review's
real tokens to the front, runs the whole padded length and reads each row's state at its own last token: fixed
shapes, no host sync, which XLA needs. A packed sequence runs only the real tokens, but sorts and batches them per
time step on the host. docs/results.md, "The LSTM off XLA":

    python xla_train/bench/peers/lstm_packed_vs_masked.py --csv FILE

Reviews of aclImdb's lengths (bench/data.py), padded at the front to maxlen 500 as the recipe pads them, batch 128;
forward, backward and Adam, the two forms alternating after warm-up steps. A peer measurement, not an xla_train
command.
"""

from __future__ import annotations

import statistics
import sys

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from xla_train.bench import report
from xla_train.bench.data import review_lengths
from xla_train.bench.timing import time_calls
from xla_train.models.lstm import PAD_ID, SentimentLSTM

COMMAND = report.peer_invocation(__file__, sys.argv[1:])
BATCH, MAXLEN, VOCAB = 128, 500, 10_000


class PackedLSTM(nn.Module):
    """The recipe's net with the same weights, reading a packed sequence of each review's real tokens."""

    def __init__(self, masked: SentimentLSTM):
        super().__init__()
        self.embedding, self.head = masked.embedding, masked.head
        self.lstm = nn.LSTM(masked.lstm.input_size, masked.lstm.hidden_size, batch_first=True)
        self.lstm.load_state_dict(masked.lstm.state_dict())

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.embedding(ids), lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.head(h[-1])


def reviews(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(front-padded ids as the recipe feeds them, the same tokens at the back for packing, lengths)."""
    rng = np.random.default_rng(seed)
    lengths = review_lengths(rng, BATCH, MAXLEN)
    front = torch.full((BATCH, MAXLEN), PAD_ID, dtype=torch.long)
    back = torch.full((BATCH, MAXLEN), PAD_ID, dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens = torch.from_numpy(rng.integers(1, VOCAB, n))
        front[row, MAXLEN - n :], back[row, :n] = tokens, tokens
    return front, back, torch.from_numpy(lengths)


def step_fn(net: nn.Module, inputs: tuple, labels: torch.Tensor):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(net(*inputs).squeeze(-1), labels)
        loss.backward()
        opt.step()

    return step


def main(argv: list[str]) -> int:
    out, _ = report.peer_args(argv)
    torch.manual_seed(0)
    front, back, lengths = reviews()
    labels = torch.randint(0, 2, (BATCH,)).float()
    masked = SentimentLSTM(VOCAB)
    packed = PackedLSTM(SentimentLSTM(VOCAB))
    packed.load_state_dict(masked.state_dict())
    with torch.no_grad():  # the same function of the same tokens, before either trains
        torch.testing.assert_close(masked(front), packed(back, lengths), atol=1e-5, rtol=0)
    fns = [step_fn(masked, (front,), labels), step_fn(packed, (back, lengths), labels)]
    times = time_calls(fns, repeats=7, warmup=2)
    padding = 1 - float(lengths.sum()) / (BATCH * MAXLEN)
    rows = [
        {
            "form": form,
            "batch": BATCH,
            "maxlen": MAXLEN,
            "median_tokens": int(lengths.median()),
            "padding": round(padding, 3),
            "step_ms": round(statistics.median(t) * 1e3, 1),
            "repeats": len(t),
            "threads": torch.get_num_threads(),
        }
        for form, t in zip(("masked (xla_train's)", "packed sequence"), times)
    ]
    for r in rows:
        print(r)
    if out is not None:
        report.write_csv(out, rows, list(rows[0]), report.provenance(COMMAND, ["CPU, eager"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
