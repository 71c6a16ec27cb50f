"""The Keras IMDB sentiment LSTM: Embedding(10000, 128) -> LSTM(32) -> Dense(1) logit, as a plain nn.Module.

Sequences are padded at the front (id 0) and the state stays unchanged where the mask is false, so padding never
changes a prediction. It runs nn.LSTM's own kernel over every step, with no packed sequence, host sync or
data-dependent shape, so it stalls no GPU and torch.export / ONNX can trace it. Parameter names and layout are
nn.LSTM's, so the XLA runtime's scan saves and loads the same state dict (docs/hardware.md, "The LSTM on XLA").
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from xla_train.errors import require_positive

PAD_ID = 0


class MaskedLSTM(nn.LSTM):
    """nn.LSTM with an optional mask (N, T): steps where it is False leave (h, c) unchanged and output zeros.

    Same forward contract as nn.LSTM otherwise (one layer, unidirectional here).
    Each row's real steps are moved to the front (keeping their order) and the
    plain kernel runs over all T steps; what it computes after a row's last real
    step is thrown away. The final h is the output at that step.
    The kernel returns the cell state only after step T, so the final c is
    rebuilt from the outputs: with h known at every step, the gates are one
    matmul and c_t = f_t * c_{t-1} + i_t * g_t is a linear recurrence, summed in
    closed form (float64 log-space cumulative products, as they span hundreds of
    steps). That costs about a third more forward time, so a caller that reads
    only h (SentimentLSTM) passes final_cell=False and gets None for c. A row
    with no real step keeps its initial state.
    """

    scan_semantics = True  # what a scan over its steps computes, mask included: XLA may run it as one loop

    def __init__(self, *args, final_cell: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.final_cell = final_cell

    def forward(self, input, hx=None, mask=None):  # noqa: A002 (nn.LSTM's argument name)
        if mask is None:
            return super().forward(input, hx)
        if self.num_layers != 1 or self.bidirectional or self.proj_size:
            raise ValueError("a mask needs a one-layer, unidirectional LSTM without projection")
        x = input if self.batch_first else input.transpose(0, 1)
        n, t, _ = x.shape
        mask = mask.to(torch.bool)
        # Where each step goes, real steps first, each group in order: a stable sort by counting, which
        # (unlike aten.sort) every backend and ONNX have.
        real_rank = torch.cumsum(mask, 1)
        lengths = real_rank[:, -1]
        dest = torch.where(mask, real_rank - 1, lengths[:, None] + torch.cumsum(~mask, 1) - 1)
        steps = torch.arange(t, device=x.device)
        order = torch.empty_like(dest).scatter_(1, dest, steps.expand(n, t))  # order[dest[j]] = j
        front = x.gather(1, order[..., None].expand_as(x))
        out, _ = super().forward(front if self.batch_first else front.transpose(0, 1), hx)
        out = out if self.batch_first else out.transpose(0, 1)
        if hx is None:
            h0 = c0 = out.new_zeros(n, self.hidden_size)
        else:
            h0, c0 = hx[0][0], hx[1][0]
        real = steps[None, :] < lengths[:, None]  # (N, T) in the moved order
        last = (lengths - 1).clamp(min=0)
        empty = (lengths == 0)[:, None]
        h = torch.where(empty, h0, out.gather(1, last[:, None, None].expand(n, 1, out.shape[2]))[:, 0])
        c = torch.where(empty, c0, self._final_cell(front, out, h0, c0, real, last))[None] if self.final_cell else None
        out = out * real[..., None].to(out.dtype)
        out = out.gather(1, dest[..., None].expand_as(out))  # back where each step came from
        return (out if self.batch_first else out.transpose(0, 1)), (h[None], c)

    def _final_cell(self, x, out, h0, c0, real, last):
        """c after each row's last real step, from the inputs and outputs (N, T, *) with the real steps first."""
        hidden = self.hidden_size
        h_prev = torch.cat([h0[:, None], out[:, :-1]], 1)
        a = x @ self.weight_ih_l0[: 3 * hidden].t() + h_prev @ self.weight_hh_l0[: 3 * hidden].t()
        if self.bias:
            a = a + (self.bias_ih_l0[: 3 * hidden] + self.bias_hh_l0[: 3 * hidden])
        i, f, g = a[..., :hidden], a[..., hidden : 2 * hidden], a[..., 2 * hidden :]
        log_f = torch.cumsum(F.logsigmoid(f.double()), 1)  # log of f_0 * ... * f_k
        log_f_last = log_f.gather(1, last[:, None, None].expand(-1, 1, hidden))
        # c_L = sum_{k<=L} (f_{k+1} ... f_L) i_k g_k + (f_0 ... f_L) c_0
        decay = torch.where(real[..., None], log_f_last - log_f, float("-inf")).exp()
        c = (decay * (torch.sigmoid(i) * torch.tanh(g)).double()).sum(1) + log_f_last[:, 0].exp() * c0.double()
        return c.to(out.dtype)


class SentimentLSTM(nn.Module):
    arch = "lstm"

    def __init__(self, vocab_size: int = 10000, embed_dim: int = 128, hidden_size: int = 32, num_classes: int = 1):
        super().__init__()
        require_positive(
            "model.net.", vocab_size=vocab_size, embed_dim=embed_dim, hidden_size=hidden_size, num_classes=num_classes
        )
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.lstm = MaskedLSTM(embed_dim, hidden_size, batch_first=True, final_cell=False)  # the head reads h only
        self.head = nn.Linear(hidden_size, num_classes)  # one logit for two classes, as the tutorial
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
        self.lstm.bias_ih_l0[hidden : 2 * hidden] = 1.0  # gate order i, f, g, o
        nn.init.xavier_uniform_(self.head.weight)
        self.head.bias.zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """int64 ids (N, T), padded at the front with 0 -> one logit per row (N, 1), or (N, num_classes)."""
        _, (h, _) = self.lstm(self.embedding(ids), mask=ids != PAD_ID)
        return self.head(h[-1])
