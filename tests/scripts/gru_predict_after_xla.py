"""Run by tests/test_own_model.py in a fresh process: torch_xla imported first, as in a notebook that trained on XLA
in the same kernel, then a GRU net's checkpoint predicted on the CPU. Prints the probabilities as JSON."""

import json
import sys

import torch_xla  # noqa: F401  (its import puts its own scan GRU, for XLA tensors only, in torch.nn.GRU's place)
from user_nets import PackedWordsNet
from xla_train.serve.predictor import load_for_inference

ckpt, texts = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps(load_for_inference(ckpt, net=PackedWordsNet).probabilities(texts).tolist()))
