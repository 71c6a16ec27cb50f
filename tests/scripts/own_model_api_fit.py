"""Run by tests/test_own_model.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import json
import sys

import numpy as np
import torch
import xla_train
from user_nets import FlatNet, PackedWordsNet

rng = np.random.default_rng(0)
x = rng.normal(size=(440, 2, 4, 4)).astype(np.float32)
x[400] = -2.0  # the test split's row 0, which its padding rows repeat: class 0 beyond doubt
y = (x[:, 0].mean((1, 2)) > 0).astype(np.int64) + 2 * (x[:, 1].mean((1, 2)) > 0)  # 4 classes the net can learn
torch.manual_seed(0)  # the net's own initialisation, drawn before fit seeds anything
net = FlatNet()
run = xla_train.fit(
    net=net, x=x[:400], y=y[:400], test_data=(x[400:], y[400:]), accelerator="xla", epochs=3, batch_size=16, lr=0.01
)
# After fit, the instance holds the best checkpoint's weights (the final test loaded them), on the CPU.
with torch.no_grad():
    direct = torch.softmax(net.eval()(torch.from_numpy(x[400:])), 1)
predicted = xla_train.load_for_inference(run.checkpoint, net=FlatNet).probabilities(x[400:])
gru_on_cpu = torch.nn.GRU(2, 3)(torch.randn(4, 1, 2))[0].shape == (4, 1, 3)  # torch's own GRU after an XLA fit
right = direct.argmax(1).numpy() == y[400:]
# A GRU net that packs its batch, from a text CSV (sys.argv: train.csv test.csv), its texts padded at the back.
train_csv, test_csv = sys.argv[1:3]
packed = xla_train.fit(
    net=PackedWordsNet(vocab=100, dim=10),
    data=train_csv,
    test_data=test_csv,
    accelerator="xla",
    epochs=2,
    batch_size=16,
    lr=0.01,
    vocab_size=100,
    maxlen=24,
    padding="post",
)
packed_block = torch.load(packed.checkpoint, weights_only=True)["xla_train"]
print(
    json.dumps(
        {
            "checkpoint": run.checkpoint,
            "diff": float((direct - predicted).abs().max()),
            "gru": gru_on_cpu,
            "right": right.tolist(),
            "y0": int(y[400]),
            "history": run.history,
            "test": run.test_metrics,
            "param_device": str(next(net.parameters()).device),
            "packed": {"test": packed.test_metrics, "padding": packed_block["padding"]},
        }
    )
)
