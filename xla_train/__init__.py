"""xla_train: the Keras-on-TPU tutorial models, trained with PyTorch/XLA and Lightning, served on a plain CPU.

From Python (a notebook): fit, evaluate, devices, benchmark, serve and load_for_inference
mirror the commands of `python -m xla_train`. Importing the package imports
neither Lightning nor torch_xla; each function imports what it needs.
"""

from xla_train.api import Run, benchmark, devices, evaluate, fit, serve

__version__ = "0.1.0"


def load_for_inference(path, net=None, args: dict | None = None):
    """The checkpoint's plain nn.Module (eval mode, CPU), its preprocessing and its labels. A checkpoint of your own
    net needs net=: its class, or an instance built as for training (its weights are loaded into it)."""
    from xla_train.serve.predictor import load_for_inference as _load

    return _load(path, net=net, args=args)


__all__ = ["Run", "benchmark", "devices", "evaluate", "fit", "load_for_inference", "serve", "__version__"]
