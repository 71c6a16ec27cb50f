"""The Keras IMDB sentiment LSTM: Embedding(10000, 128) -> LSTM(32) -> Dense(1) logit, as a plain nn.Module.

Sequences arrive padded at the front (id 0), so a short review is mostly padding.
The LSTM skips padded steps: its state is left unchanged where the mask is
false, which makes the prediction independent of how much padding there is.
Here that runs on nn.LSTM's own kernel through a packed sequence; the parameter
names and layout are nn.LSTM's, so whatever else runs this recurrence (the XLA
runtime swaps in a scan) saves and loads the same state dict.
"""
from __future__ import annotations


import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from xla_train.errors import require_positive

PAD_ID = 0


class MaskedLSTM(nn.LSTM):
    """nn.LSTM with an optional mask (N, T): steps where it is False leave (h, c) unchanged and output zeros.

    Same forward contract as nn.LSTM otherwise (one layer, unidirectional here).
    The masked steps are moved to the end of each row (stable, so the real
    steps keep their order), the rows are packed, and the outputs are moved
    back; a row with no real step keeps its initial state.
    """

    def forward(self, input, hx=None, mask=None):  # noqa: A002 (nn.LSTM's argument name)
        if mask is None:
            return super().forward(input, hx)
        if self.num_layers != 1 or self.bidirectional or self.proj_size:
            raise ValueError("a mask needs a one-layer, unidirectional LSTM without projection")
        x = input if self.batch_first else input.transpose(0, 1)
        n, t, _ = x.shape
        mask = mask.to(torch.bool)
        lengths = mask.sum(1)
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # real steps first, in order
        packed = pack_padded_sequence(x.gather(1, order[..., None].expand_as(x)), lengths.clamp(min=1).cpu(),
                                      batch_first=True, enforce_sorted=False)
        out, (h, c) = super().forward(packed, hx)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=t)
        out = torch.zeros_like(out).scatter(1, order[..., None].expand_as(out), out)
        empty = (lengths == 0)[None, :, None]
        if empty.any():  # their one packed step was padding: undo it (their outputs are masked below)
            h0, c0 = hx if hx is not None else (torch.zeros_like(h), torch.zeros_like(c))
            h, c = torch.where(empty, h0, h), torch.where(empty, c0, c)
        out = out * mask[..., None].to(out.dtype)
        return (out if self.batch_first else out.transpose(0, 1)), (h, c)


class SentimentLSTM(nn.Module):
    arch = "lstm"

    def __init__(self, vocab_size: int = 10000, embed_dim: int = 128, hidden_size: int = 32):
        super().__init__()
        require_positive("model.net.", vocab_size=vocab_size, embed_dim=embed_dim, hidden_size=hidden_size)
        self.config = {"vocab_size": vocab_size, "embed_dim": embed_dim, "hidden_size": hidden_size}
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.lstm = MaskedLSTM(embed_dim, hidden_size, batch_first=True)
        self.head = nn.Linear(hidden_size, 1)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Keras' initialisers, so training starts where the tutorial's does.

        Embedding uniform(-0.05, 0.05); LSTM kernel Glorot-uniform and recurrent kernel
        orthogonal, each over all four gates at once; bias zero but the forget gate's,
        which is one (unit_forget_bias); Dense Glorot-uniform, bias zero.
        """
        nn.init.uniform_(self.embedding.weight, -0.05, 0.05)
        self.embedding.weight[PAD_ID].zero_()
        hidden = self.lstm.hidden_size
        nn.init.xavier_uniform_(self.lstm.weight_ih_l0)
        nn.init.orthogonal_(self.lstm.weight_hh_l0)  # (4H, H) = Keras' (H, 4H) recurrent kernel, transposed
        self.lstm.bias_ih_l0.zero_()
        self.lstm.bias_hh_l0.zero_()
        self.lstm.bias_ih_l0[hidden:2 * hidden] = 1.0  # gate order i, f, g, o
        nn.init.xavier_uniform_(self.head.weight)
        self.head.bias.zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """int64 ids (N, T), padded at the front with 0 -> one logit per row (N, 1)."""
        _, (h, _) = self.lstm(self.embedding(ids), mask=ids != PAD_ID)
        return self.head(h[-1])
