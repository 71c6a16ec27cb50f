"""The built-in nets, by key; how any net is named in a checkpoint is models/reference.py.

A checkpoint names a built-in net by this key, never by an import path, so loading one can only ever build one of
these classes; a user's net takes the same path, named by the class the user gives (docs/own_model.md).
"""

from xla_train.models.cnn import CifarCNN
from xla_train.models.lstm import SentimentLSTM
from xla_train.models.reference import NETS, NetRef
from xla_train.models.resnet import CifarResNet

__all__ = ["CifarCNN", "CifarResNet", "SentimentLSTM", "NETS", "NetRef"]
