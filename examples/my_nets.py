"""Nets as a user writes them: plain nn.Modules that know nothing of xla_train, Lightning or TPUs.

xla_train trains any of them with the recipes for your own data (docs/own_model.md), for instance:

    PYTHONPATH=examples python -m xla_train recipe=arrays data.path=mnist.npz net=my_nets.SmallCNN
    PYTHONPATH=examples python -m xla_train recipe=texts data.path=reviews.csv net=my_nets.TextRNN
    PYTHONPATH=examples python -m xla_train recipe=texts data.path=reviews.csv data.padding=post net=my_nets.PackedGRU

A classifier maps a batch to logits: (N, classes), or (N, 1) with one logit for two classes.
"""

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence


class SmallCNN(nn.Module):
    """Two convolution blocks and a dense head, for small images: (N, in_channels, image_size, image_size)."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(0.25),
            nn.Linear(2 * width * (image_size // 4) ** 2, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class TextRNN(nn.Module):
    """Embedding, a recurrent layer (GRU or LSTM, any depth, either direction) and a linear head on the last layer's
    final states (both directions'). Token ids come padded at the front with 0, as xla_train's text recipes pad."""

    def __init__(
        self,
        vocab_size: int = 10000,
        embed_dim: int = 64,
        hidden_size: int = 64,
        num_classes: int = 2,
        cell: str = "gru",
        num_layers: int = 1,
        bidirectional: bool = False,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.rnn = rnn(embed_dim, hidden_size, num_layers=num_layers, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(hidden_size * (2 if bidirectional else 1), num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(self.embedding(ids))
        h = h[0] if isinstance(h, tuple) else h  # an LSTM's (h, c)
        last = h[-2:] if self.rnn.bidirectional else h[-1:]  # (directions, N, H) of the last layer
        return self.head(torch.cat(list(last), dim=1))


class PackedGRU(nn.Module):
    """A bidirectional GRU fed as PyTorch's tutorials feed a variable-length batch: pack_padded_sequence, the lengths
    counted from the padding, so each direction starts and ends at the text's own words. Token ids come padded at
    the back with 0: train it with data.padding=post (docs/own_model.md, "Variable-length sequences")."""

    def __init__(self, vocab_size: int = 10000, dim: int = 64, num_classes: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.gru = nn.GRU(dim, dim, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * dim, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        lengths = (ids != 0).sum(1)
        packed = pack_padded_sequence(self.embed(ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)
        return self.out(torch.cat([h[0], h[1]], 1))


class MLP(nn.Module):
    """A dense net on flattened inputs of `in_features` values (3 x 32 x 32 by default: the quickstart's images)."""

    def __init__(self, in_features: int = 3 * 32 * 32, num_classes: int = 10, width: int = 512):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, width),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(width, width // 2),
            nn.ReLU(),
            nn.Linear(width // 2, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)
