"""Every reach behind torch_xla's public API, with the version it was read in: torch_xla 2.9.0 (pyproject.toml caps
it), and its one process-wide patch, with its install and its undo. On an upgrade, this file is the audit. The
Lightning entries that concern XLA strategies stay in xla_train/compat.py, with Lightning's other private uses.
"""

from __future__ import annotations

# --- torch_xla ------------------------------------------------------------------------------------------------


def xla_runtime_started() -> bool:
    """torch_xla._XLAC._xla_runtime_is_initialized, which xmp.spawn itself checks (_internal/pjrt.py)."""
    import torch_xla

    return torch_xla._XLAC._xla_runtime_is_initialized()


def xla_sharded_across_devices(tensor) -> bool:
    """Whether an XLA tensor's data is split over devices: torch_xla's own test in its distributed checkpoint
    (experimental/distributed_checkpoint/_helpers.py, _is_sharded_tensor: a sharding type other than
    REPLICATED), on _XLAC._get_xla_sharding_type (None: no sharding annotation, a full copy per device)."""
    import torch_xla
    from torch_xla.distributed.spmd import ShardingType

    kind = torch_xla._XLAC._get_xla_sharding_type(tensor)
    return kind is not None and ShardingType(kind) != ShardingType.REPLICATED


def xla_mark_sharding(tensor, op_sharding) -> None:
    """What `xs.mark_sharding` does for a plain XLA tensor (`torch_xla/distributed/spmd/xla_sharding.py`, 2.9.0):
    `_XLAC._xla_mark_sharding` with the mesh's OpSharding, here built once by the caller. The public function
    rebuilds it and probes for jax/torchax on every call, a cost paid for every state tensor of every K-step
    execution (docs/layout.md, "Private APIs and patches")."""
    import torch_xla

    torch_xla._XLAC._xla_mark_sharding(tensor, op_sharding)


# The lazy-tensor internals behind runtime/torch_xla/step_program.py and runtime/torch_xla/scan_loop.py, as torch_xla's own
# experimental/gradient_accumulation.py and experimental/scan.py use them (2.9.0).


def xla_pending(tensors) -> bool:
    """Whether any of these tensors holds pending (traced, not yet run) work instead of device data."""
    import torch_xla

    return any(torch_xla._XLAC._check_tensor_need_materialization(list(tensors)))


def xla_to_cpu(tensors) -> list:
    """XLA tensors as CPU tensors, all in one transfer: `_XLAC._xla_get_cpu_tensors`, the call behind `.cpu()`
    (torch_xla 2.9.0's tensor methods) and behind Lightning's XLACheckpointIO (xm._maybe_convert_to_cpu), given
    the whole list instead of one tensor a call. Pending work behind them runs as one graph."""
    import torch_xla

    return torch_xla._XLAC._xla_get_cpu_tensors(list(tensors))


def xla_materialize(tensors) -> None:
    """Run the pending work behind these tensors as one graph, without ending the step: unlike torch_xla.sync(),
    the device's random seed does not advance (SyncTensorsGraph, not MarkStep)."""
    import torch_xla

    torch_xla._XLAC._xla_sync_multi(list(tensors), devices=[], wait=False, sync_xla_data=False)


def xla_graph_inputs(outputs, inputs) -> tuple[list[int], list]:
    """(tensor ids, device data) of the inputs of the graph that computes `outputs`, in parameter order;
    `inputs` names the tensors whose ids should be reported as theirs."""
    import torch_xla

    return torch_xla._XLAC._get_tensors_xla_device_data_node(list(outputs), list(inputs))


def xla_hlo_module(outputs) -> bytes:
    """The HLO module (serialised proto) of the graph that computes `outputs`, a tuple in their order."""
    import torch_xla

    return torch_xla._XLAC._get_xla_tensors_hlo_proto(list(outputs))


def xla_tensor_id(tensor) -> int:
    import torch_xla

    return torch_xla._XLAC._xla_get_tensor_id(tensor)


def xla_seed_input_id() -> int:
    """The id under which a graph's random-number seed appears among its inputs."""
    import torch_xla

    return torch_xla._XLAC._get_seed_info_id()


def xla_seed_after_step(seed: int) -> int:
    """The device seed after torch_xla.sync(): XLAGraphExecutor::DeviceContextArena::MarkStep sets
    seed = 1012031 + seed * 7012063 (uint64; csrc/xla_graph_executor.cpp, 2.9.0). steps_per_execution keeps a
    step's batch without a sync, and gives the next step the seed that sync would have given it."""
    return (1012031 + (seed & (2**64 - 1)) * 7012063) & (2**64 - 1)


def xla_lowered(outputs, inputs) -> tuple[bytes, list[int], int]:
    """(HLO module, parameter number of each of `inputs` or -1 where unused, how many parameters) of the graph that
    computes `outputs`, lowered as torch_xla's scan lowers its body (experimental/scan.py, _scan_impl_flat, 2.9.0:
    a LoweringContext, where every tensor without pending work becomes a parameter; runtime/torch_xla/scan_loop.py)."""
    import torch_xla

    ctx = torch_xla._XLAC.lowering.LoweringContext("FnComputation")
    ctx.set_name_string("fn_ctx")
    ctx.build(list(outputs))
    return ctx.hlo(), [ctx.tensor_parameter_id(t) for t in inputs], len(ctx.device_parameter_id_tensor_mapping())


def xla_user_computation(name: str, inputs, computation) -> list:
    """Pending tensors for the outputs of an xla_builder computation applied to `inputs`."""
    import torch_xla

    return torch_xla._XLAC._xla_user_computation(name, list(inputs), computation)


def tpu_worker_hosts() -> list[str]:
    """The TPU VM hosts of this slice, in worker-id order (`torch_xla/_internal/tpu.py`, `get_worker_ips`, 2.9.0):
    from TPU_WORKER_HOSTNAMES where TPU_SKIP_MDS_QUERY is set (GKE, xpk), else from the metadata server; ['localhost']
    for one host. No device work, unlike the `xla://` rendezvous's own search for host 0 under SPMD, which runs a
    transfer over every device (`_spmd_find_master_ip`)."""
    from torch_xla._internal import tpu

    return tpu.get_worker_ips()


def tpu_worker_index() -> int:
    """This TPU VM's worker id in its slice (`torch_xla/_internal/tpu.py`, `worker_id`, 2.9.0: TPU_WORKER_ID or
    CLOUD_TPU_TASK_ID where TPU_SKIP_MDS_QUERY is set, else the metadata server), which is the process index
    under SPMD; readable before the runtime starts, unlike xr.process_index()."""
    from torch_xla._internal import tpu

    if len(tpu_worker_hosts()) == 1:
        return 0
    return tpu.worker_id()


# --- process-wide patch: its install and its undo -------------------------------------------------------------

_SYNC_ORIGINALS: tuple | None = None


def time_xla_syncs() -> list[float]:
    """Install: torch_xla.sync and xm.mark_step rebound to wrappers that add their wall and CPU seconds, and the
    compile seconds spent inside them, to the returned [wall, cpu, compile] (runtime/backend.py,
    XLABackend.sync_clock). mark_step calls sync: the outer call counts once. Undo: untime_xla_syncs()."""
    global _SYNC_ORIGINALS
    import time

    import torch_xla
    import torch_xla.core.xla_model as xm
    from torch_xla.debug import metrics as met

    spent, depth = [0.0, 0.0, 0.0], [0]

    def compiled_s() -> float:
        data = met.metric_data("CompileTime")
        return data[1] / 1e9 if data else 0.0

    def timed(fn):
        def wrapper(*args, **kwargs):
            depth[0] += 1
            t0, c0, k0 = time.perf_counter(), time.thread_time(), compiled_s()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spent[0] += time.perf_counter() - t0
                    spent[1] += time.thread_time() - c0
                    spent[2] += compiled_s() - k0

        return wrapper

    _SYNC_ORIGINALS = (torch_xla.sync, xm.mark_step)
    torch_xla.sync, xm.mark_step = timed(torch_xla.sync), timed(xm.mark_step)
    return spent


def untime_xla_syncs() -> None:
    """Undo time_xla_syncs()."""
    global _SYNC_ORIGINALS
    if _SYNC_ORIGINALS is not None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        torch_xla.sync, xm.mark_step = _SYNC_ORIGINALS
        _SYNC_ORIGINALS = None


_JAX_LOOKUPS: dict | None = None
_NO_JAX_MODULES = ("torch_xla.debug.profiler", "torch_xla.distributed.spmd.xla_sharding")


def no_jax_for_torch_xla() -> None:
    """Install: torch_xla 2.9.0 imports jax wherever it is installed, through _internal/jax_workarounds.py's
    maybe_get_jax: in debug/profiler.py's Trace.__enter__ (to enter jax's named scope too, for torchax's lowering) and
    in distributed/spmd/xla_sharding.py (to shard a torchax tensor), neither of which a torch_xla run has. Imported,
    jax starts an XLA client of its own beside torch_xla's (resident memory), and its import draws from numpy's
    global RNG, in MpDeviceLoader's thread at the first batch, so a run's numpy draws hung on when that thread got
    there. Here both modules' maybe_get_jax answer None for the life of the process, and jax is never imported by a
    torch_xla run. Undo: jax_for_torch_xla_back()."""
    global _JAX_LOOKUPS
    if _JAX_LOOKUPS is not None:
        return
    import importlib

    modules = [importlib.import_module(name) for name in _NO_JAX_MODULES]
    _JAX_LOOKUPS = {m: m.maybe_get_jax for m in modules}
    for m in modules:
        m.maybe_get_jax = _no_jax


def _no_jax(log: bool = True):
    return None


def jax_for_torch_xla_back() -> None:
    """Undo no_jax_for_torch_xla()."""
    global _JAX_LOOKUPS
    if _JAX_LOOKUPS is not None:
        for m, lookup in _JAX_LOOKUPS.items():
            m.maybe_get_jax = lookup
        _JAX_LOOKUPS = None
