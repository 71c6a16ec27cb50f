"""Everything that knows about XLA, TPUs and GPUs; models and data know none of it."""
from xla_train.runtime.plan import ACCELERATORS, HardwarePlan, plan_hardware


def wait_for_device(device) -> None:
    """Block until queued device work is done, so host clocks measure the device."""
    if device.type == "xla":
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()
    elif device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


__all__ = ["ACCELERATORS", "HardwarePlan", "plan_hardware", "wait_for_device"]
