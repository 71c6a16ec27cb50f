"""The eager runtime's backends: plain PyTorch on the CPU (the base Backend) and on CUDA (torch-xla 2.9 has no CUDA
build, so a GPU without runtime=jax runs here)."""

from __future__ import annotations

import torch

from xla_train.runtime.backend import Backend


class CUDABackend(Backend):
    """Plain Lightning on CUDA."""

    device_type = "cuda"
    runs_on_host = False
    waits_each_step = True

    def wait(self, device) -> None:
        torch.cuda.synchronize(device)

    def rng_state(self, device):
        return torch.cuda.get_rng_state(device)

    def set_rng_state(self, device, state) -> None:
        if state is not None:
            torch.cuda.set_rng_state(state, device)

    def peak_mb(self, device) -> float | None:
        return torch.cuda.max_memory_allocated(device) / 2**20

    def describe(self, device, cpu_model: str = "") -> str:
        return torch.cuda.get_device_name(device)

    def native_bf16(self) -> tuple[str | None, str]:
        lacks = "the GPU has no native bf16 (compute capability < 8.0)"
        if not torch.cuda.is_available():
            return None, lacks
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) >= (8, 0) and torch.cuda.is_bf16_supported():
            return f"the GPU has compute capability {major}.{minor}", lacks
        return None, lacks

    def compile_default(self) -> tuple[bool | str, str]:
        return "auto", ""  # the samples rule; compiled GPU steps not yet measured here


CPU = Backend()
CUDA = CUDABackend()


def backend_for(accelerator: str) -> Backend:
    """The backend accelerator=cpu or gpu trains on."""
    return CUDA if accelerator == "gpu" else CPU


def backend_of(device_type: str) -> Backend:
    return {b.device_type: b for b in (CPU, CUDA)}[device_type]
