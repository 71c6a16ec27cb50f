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




def device_rng_state(device):
    """The device's own RNG state where it has one apart from torch's (XLA keeps a seed per device)."""
    if device.type == "xla":
        import torch_xla.core.xla_model as xm

        return int(xm.get_rng_state(device))
    if device.type == "cuda":
        import torch

        return torch.cuda.get_rng_state(device)
    return None


def set_device_rng_state(device, state) -> None:
    if state is None:
        return
    if device.type == "xla":
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(int(state), device)
    elif device.type == "cuda":
        import torch

        torch.cuda.set_rng_state(state, device)


__all__ = ["ACCELERATORS", "HardwarePlan", "plan_hardware", "wait_for_device", "device_rng_state",
           "set_device_rng_state"]
