"""A user's own nets, outside xla_train: plain nn.Modules that know nothing of it (no arch, no config, no base).

Importing this module appends a line to the file USER_NETS_IMPORTED names, so a test can tell whether any process
imported it: loading a checkpoint must never import it on the checkpoint's word.
"""

import os
import time

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

if os.environ.get("USER_NETS_IMPORTED"):
    with open(os.environ["USER_NETS_IMPORTED"], "a") as f:
        f.write(f"{os.getpid()}\n")


class PixelNet(nn.Module):
    """Images (N, C, H, W) to class logits: a small conv net with a BatchNorm (running statistics in the state)."""

    def __init__(self, classes: int = 4, channels: int = 3, width: int = 8):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(width * 16, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class FlatNet(nn.Module):
    """Any float rows (N, ...) to four logits; no constructor arguments at all, a lazy layer, and a BatchNorm (its
    running statistics in the state, so a net whose buffers were not loaded would answer otherwise)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.LazyLinear(32), nn.BatchNorm1d(32), nn.Tanh(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class WordsNet(nn.Module):
    """Token ids (N, T) padded at the front with 0 -> one logit (two classes): an embedding, a 2-layer GRU."""

    def __init__(self, vocab: int = 100, dim: int = 12):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.gru = nn.GRU(dim, dim, num_layers=2, batch_first=True)
        self.out = nn.Linear(dim, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(self.embed(ids))
        return self.out(h[-1])


class PackedWordsNet(nn.Module):
    """Token ids (N, T) padded at the back with 0 -> one logit (two classes), as PyTorch's tutorials write a
    variable-length RNN: the lengths counted from the padding, pack_padded_sequence (lengths .cpu(),
    enforce_sorted=False), a bidirectional GRU, pad_packed_sequence; each text's final states and its outputs
    averaged over its own length."""

    def __init__(self, vocab: int = 100, dim: int = 12):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.gru = nn.GRU(dim, dim, batch_first=True, bidirectional=True)
        self.out = nn.Linear(4 * dim, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        lengths = (ids != 0).sum(1)
        packed = pack_padded_sequence(self.embed(ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.gru(packed)
        out, lengths = pad_packed_sequence(out, batch_first=True)
        mean = out.sum(1) / lengths[:, None].to(out)
        return self.out(torch.cat([h[0], h[1], mean], 1))


class KerasCNN(nn.Module):
    """A copy of xla_train.models.CifarCNN, layer for layer, as a user would write it from the Keras tutorial."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.25, dense_dropout: float = 0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.BatchNorm2d(3),
            nn.Conv2d(3, 32, 3, padding="same"),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding="same"),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(dropout),
            nn.BatchNorm2d(32),
            nn.Conv2d(32, 64, 3, padding="same"),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(dropout),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 512),
            nn.ReLU(),
            nn.Dropout(dense_dropout),
            nn.Linear(512, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class ThreeWay(nn.Module):
    """Always three logits, whatever the data's classes."""

    def __init__(self):
        super().__init__()
        self.out = nn.Sequential(nn.Flatten(), nn.LazyLinear(3))

    def forward(self, x):
        return self.out(x)


class BrightOnly(nn.Module):
    """Averages only the pixels above zero: a shape that depends on the data, which XLA compiles anew each time."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.out = nn.Linear(1, num_classes)

    def forward(self, x):
        bright = x[x > 0]  # how many depends on the batch
        return self.out(bright.mean().reshape(1, 1).expand(len(x), 1))


class NotANet:
    """Not an nn.Module."""


class SlowNet(nn.Module):
    """PixelNet, each forward held `delay` seconds: while a batch is in the worker, the requests sent meanwhile
    queue behind it however fast or loaded the machine is (tests/test_serve.py: batching and SIGTERM)."""

    def __init__(self, classes: int = 10, delay: float = 0.5):
        super().__init__()
        self.delay, self.net = delay, PixelNet(classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay)
        return self.net(x)


class PoissonNet(nn.Module):
    """A linear net whose forward also draws Poisson noise (aten::poisson): an op torchax 0.0.13 has no lowering for."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.out = nn.Linear(3 * 32 * 32, classes)

    def forward(self, x):
        x = x.flatten(1)
        return self.out(x + 0 * torch.poisson(x.abs()))


class PixelTwin(PixelNet):
    """PixelNet under another name: the same weights by name and shape, so a checkpoint of either loads into the
    other, and only the class the checkpoint records tells them apart. `built` counts the instances made, so a
    test can see that one was never built."""

    built = 0

    def __init__(self, classes: int = 4, channels: int = 3, width: int = 8):
        PixelTwin.built += 1
        super().__init__(classes, channels, width)


class GoesNaN(nn.Module):
    """Two logits from flat rows, until its `after`-th training forward; from the next one on they are NaN, as a net
    whose loss diverged. Which step goes wrong is known exactly, on any runtime (`calls` is a buffer)."""

    def __init__(self, features: int = 4, after: int = 5):
        super().__init__()
        self.out = nn.Linear(features, 2)
        self.after = after
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
        logits = self.out(x.flatten(1))
        return logits + torch.where(self.calls > self.after, float("nan"), 0.0)


def create_model(classes=4, width=8):
    """The Keras tutorials' create_model(), in torch: a function that builds the net, with no annotations."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    )


class Residual(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) + x


class Stacked(nn.Module):
    """A net that takes a class as an init argument (as torchvision's ResNet takes its block)."""

    def __init__(self, block: type[nn.Module] = Residual, width: int = 8, classes: int = 4):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.block = block(width)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.stem(x)))
