"""xla_train: the Keras-on-TPU tutorial models, trained with PyTorch/XLA and Lightning, served on a plain CPU.

Importing the package imports neither Lightning nor torch_xla.
"""
__version__ = "0.1.0"


def load_for_inference(path):
    """The checkpoint's plain nn.Module (eval mode, CPU), its preprocessing and its labels."""
    from xla_train.inference import load_for_inference as _load

    return _load(path)


__all__ = ["load_for_inference", "__version__"]
