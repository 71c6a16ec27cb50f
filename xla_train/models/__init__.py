"""The nets, by architecture name.

A checkpoint names its net by this key, never by an import path, so loading a
file can only ever build one of these classes.
"""

from xla_train.models.cnn import CifarCNN
from xla_train.models.lstm import SentimentLSTM
from xla_train.models.resnet import CifarResNet

NETS = {cls.arch: cls for cls in (CifarCNN, CifarResNet, SentimentLSTM)}


def build_net(arch: str, config: dict):
    if arch not in NETS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(sorted(NETS))}")
    return NETS[arch](**config)


__all__ = ["CifarCNN", "CifarResNet", "SentimentLSTM", "NETS", "build_net"]
