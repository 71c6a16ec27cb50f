"""What callers off the runtime ask of a device: wait for it, save and restore its RNG, count its compiles, name it.

Training callbacks and the benchmarks call these instead of torch_xla or
torch.cuda, so that the device kinds stay in runtime/.
"""

from __future__ import annotations

from xla_train.errors import ConfigError


def wait_for_device(device) -> None:
    """Block until queued device work is done, so host clocks measure the device."""
    if device.type == "xla":
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()
    elif device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def cut_graph(device) -> None:
    """End the pending lazy graph and dispatch it (XLA); nothing elsewhere."""
    if device.type == "xla":
        import torch_xla

        torch_xla.sync()


def device_data(t, device):
    """A host tensor on the device as data. On XLA `.to()` makes a 0-dim 0 or 1 a constant of the graph
    (torch_xla's special scalars), so a value that changes between executions must come this way, as a loader
    sends a batch, or each value would compile its own program."""
    if device.type == "xla":
        import torch_xla.core.xla_model as xm

        return xm.send_cpu_data_to_device([t], device)[0]
    return t.to(device)


_SYNC_SECONDS: list[float] | None = None  # [wall seconds, this thread's CPU seconds] inside syncs


def sync_clock(device, cpu: bool = False):
    """A function returning the seconds spent so far inside XLA syncs (torch_xla.sync, xm.mark_step): wall
    seconds, or with cpu=True the CPU seconds of the threads that called them.

    Such a call hashes the graph, looks it up and dispatches it, but it also waits for the device while the
    previous step's execution still runs, and XLA:CPU sometimes runs the whole execution inside it, so a
    host clock around a step cannot tell the host's share from the device's without knowing this. The
    timing wrappers are installed once, for the life of the process; elsewhere than XLA this returns 0."""
    global _SYNC_SECONDS
    if device.type != "xla":
        return lambda: 0.0
    which = 1 if cpu else 0
    if _SYNC_SECONDS is not None:
        return lambda: _SYNC_SECONDS[which]
    import time

    import torch_xla
    import torch_xla.core.xla_model as xm

    spent, depth = [0.0, 0.0], [0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            depth[0] += 1
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:  # mark_step calls sync: count the outer call once
                    spent[0] += time.perf_counter() - t0
                    spent[1] += time.thread_time() - c0

        return wrapper

    torch_xla.sync, xm.mark_step = timed(torch_xla.sync), timed(xm.mark_step)
    _SYNC_SECONDS = spent
    return lambda: spent[which]


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


def xla_counters() -> tuple[int, float, int]:
    """(graphs compiled, seconds compiling, device-to-host transfers) so far in this process: torch_xla's own
    host-side counters, so reading them costs no device sync."""
    from torch_xla.debug import metrics as met

    compile_time = met.metric_data("CompileTime")
    transfers = met.metric_data("TransferFromDeviceTime")
    return (
        int(met.counter_value("UncachedCompile") or 0),
        compile_time[1] / 1e9 if compile_time else 0.0,
        int(transfers[0]) if transfers else 0,
    )


MATMUL_PRECISIONS = ("default", "high", "highest")
MATMUL_MEANING = {
    "default": "one bf16 pass for float32 on a TPU",
    "high": "three bf16 passes on a TPU, about 14 bits",
    "highest": "six bf16 passes on a TPU, about float32",
}


def set_matmul_precision(precision: str) -> None:
    """torch_xla's precision for float32 matmuls and convolutions (torch_xla/backends/__init__.py, 2.9.0): process
    wide, read as each graph is lowered. So it is set once, before the first trace; a change after a graph has run
    would leave the cached graphs at the old precision and the new ones at the new, and is refused. XLA:CPU
    computes float32 whatever it says."""
    import logging

    import torch_xla.backends as backends

    if precision not in MATMUL_PRECISIONS:
        raise ConfigError(f"matmul_precision={precision!r}; use one of {', '.join(MATMUL_PRECISIONS)}")
    current = backends.get_mat_mul_precision()
    if precision == current:
        return
    if xla_executions():
        raise ConfigError(
            f"matmul_precision={precision}: this process has already run XLA graphs at {current}; "
            f"the precision is set once per process, before the first step (start a new process)"
        )
    log = logging.getLogger(backends.__name__)
    level = log.level
    log.setLevel(logging.ERROR)  # its warning about setting it twice: this is the first time here
    try:
        backends.set_mat_mul_precision(precision)
    finally:
        log.setLevel(level)


def xla_executions() -> int:
    """Programs dispatched so far in this process: every sync that found a graph looks it up in the compile cache
    (a hit or a compile), on the host as it dispatches. torch_xla's ExecuteComputation counter would lag: it
    counts executions as the device thread runs them."""
    from torch_xla.debug import metrics as met

    return sum(int(met.counter_value(n) or 0) for n in ("CachedCompile", "UncachedCompile"))


def counters(device) -> tuple[int, float, int]:
    """xla_counters() on XLA; zeros elsewhere, where nothing is compiled ahead."""
    return xla_counters() if device.type == "xla" else (0, 0.0, 0)


def device_name(device, cpu_model: str = "") -> str:
    if device.type == "xla":
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        try:
            kind = xm.xla_device_kind(device)  # e.g. "TPU v4"
        except RuntimeError:  # under SPMD the device is a virtual one, which has no kind
            kind = None
        return f"XLA:{xr.device_type()}" + (f" ({kind})" if kind and kind.lower() != "cpu" else "")
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return f"CPU, eager ({cpu_model})" if cpu_model else "CPU, eager"


def device_peak_mb(device) -> float | None:
    """Peak device memory where the runtime reports it (TPU, GPU); None on XLA:CPU and the CPU."""
    try:
        if device.type == "cuda":
            import torch

            return torch.cuda.max_memory_allocated(device) / 2**20
        if device.type == "xla":
            import torch_xla.core.xla_model as xm

            return xm.get_memory_info(device)["peak_bytes_used"] / 2**20
    except (RuntimeError, KeyError):  # XLA:CPU: "GetAllocatorStats is not supported"
        pass
    return None
