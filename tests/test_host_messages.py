"""What hosts and worker processes tell each other, as fast round trips: the pod's stop agreement over a real
key-value store (torch_xla) and over the engine's all-gather (JAX), and what an xla_mp worker hands back to the parent
process (its metrics, logger and callbacks).

The real two-host and forked-worker runs are in tests/test_pods.py and tests/test_xla_mp.py (`-m slow`); these
check the pieces those runs depend on, in the default suite.
"""

import pickle
import threading
import types
from datetime import timedelta
from functools import partial

import numpy as np
import torch.distributed as dist
from lightning.pytorch.loggers import CSVLogger

from helpers import require
from xla_train.runtime.hosts import HostTopology, ProgramHosts
from xla_train.runtime.torch_xla.multihost import StoreChannel
from helpers import free_port


def _channels(world: int) -> list[StoreChannel]:
    """StoreChannels over one TCPStore, as torch_xla's xla:// rendezvous would hand them to each host."""
    port = free_port()
    server = dist.TCPStore(
        "127.0.0.1", port, world, is_master=True, timeout=timedelta(seconds=30), wait_for_workers=False
    )
    out = []
    for rank in range(world):
        store = (
            server
            if rank == 0
            else dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=30))
        )
        ch = StoreChannel.__new__(StoreChannel)  # the rendezvous itself needs a TPU pod's runtime
        ch.store, ch.rank, ch.world, ch._calls, ch._gathered = (
            dist.PrefixStore("xla_train", store),
            rank,
            world,
            0,
            None,
        )
        out.append(ch)
    return out


class _Gathering:
    """JaxEngine.gather (an all-gather over the processes, stacked in process order) among threads that stand for
    the processes: JAX's multi-controller runtime itself needs several processes (tests/test_jax_pods.py)."""

    def __init__(self, world: int) -> None:
        self.barrier, self.rows = threading.Barrier(world, timeout=30), [None] * world

    def engine(self, rank: int):
        return types.SimpleNamespace(gather=partial(self._gather, rank))

    def _gather(self, rank: int, a):
        self.rows[rank] = np.array(a)
        self.barrier.wait()
        out = np.stack(self.rows)
        self.barrier.wait()
        return out


def _engine_channels(world: int) -> list:
    require("torchax")
    from xla_train.runtime.jax.multihost import ProcessChannel

    gathering, out = _Gathering(world), []
    for rank in range(world):
        ch = ProcessChannel.__new__(ProcessChannel)
        ch.engine, ch.rank, ch.world = gathering.engine(rank), rank, world
        out.append(ch)
    return out


CHANNELS = {"torch_xla": _channels, "jax": _engine_channels}


def _on_every_host(channels, each) -> list:
    """each(me, rank) on every host at once, me a strategy's host side (runtime/hosts.py) over its channel; returns
    each host's answer."""
    answers = [None] * len(channels)

    def host(rank: int) -> None:
        me = types.SimpleNamespace(topology=HostTopology(rank, len(channels), 1, len(channels)), channel=channels[rank])
        me.reduce_boolean_decision = partial(ProgramHosts.reduce_boolean_decision, me)
        try:
            answers[rank] = each(me, rank)
        except Exception as e:
            answers[rank] = e

    threads = [threading.Thread(target=host, args=(r,)) for r in range(len(channels))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def _agreeing(requests: list[list[bool]]):
    return lambda me, rank: [ProgramHosts.agree_to_stop(me, r) for r in requests[rank]]


def test_pod_hosts_agree_to_stop_after_the_step_in_which_any_host_was_signalled(runtime):
    # host 1 receives the signal at step 3, host 2 at step 4; host 0 never does: every host stops after step 3
    requests = [[False] * 5, [False, False, True, True, True], [False, False, False, True, True]]
    answers = _on_every_host(CHANNELS[runtime](3), _agreeing(requests))
    assert answers == [[False, False, True, True, True]] * 3


def test_jax_processes_broadcast_over_the_engines_all_gather_and_refuse_to_fall_out_of_step():
    """Lightning's broadcast (the run folder) from process 1 reaches every process whole; a process that broadcasts
    from another line of code is refused by name, not handed the others' value."""
    sent = {"run": "runs/quickstart/version_3", "long": "x" * 5000}

    def broadcast(me, rank):
        return me.channel.broadcast(sent if rank == 1 else None, src=1, site="fit.py:10")

    assert _on_every_host(_engine_channels(3), broadcast) == [sent] * 3

    def astray(me, rank):
        return me.channel.broadcast(rank, src=0, site="fit.py:10" if rank else "fit.py:99")

    answers = _on_every_host(_engine_channels(2), astray)
    assert answers[0] == 0, answers
    assert isinstance(answers[1], RuntimeError), answers
    assert str(answers[1]) == "hosts out of step: host 0 broadcast from fit.py:99, host 1 expected one from fit.py:10"


def test_the_jax_strategy_reduces_a_processs_own_tensor_over_its_engine_and_leaves_the_programs_sums():
    """Lightning's reduce (a data loader's length on every process) sums over the processes through the engine's
    all-gather; the sums a program computed over the global batch are already the same everywhere and stay as they
    are."""
    require("torchax")
    import torch

    from xla_train.runtime.jax.placement import HostSums
    from xla_train.runtime.jax.strategy import JaxStrategy

    gathering, program_sums = _Gathering(2), HostSums(None, np.ones(4, np.float32))

    def reduce(me, rank):
        me.engine, me.world_size = gathering.engine(rank), 2
        me.all_gather = partial(JaxStrategy.all_gather, me)
        own = JaxStrategy.reduce(me, torch.tensor([rank + 1.0, 10.0]), reduce_op="sum")
        mean = JaxStrategy.reduce(me, torch.tensor([rank + 1.0]))
        return own.tolist(), mean.tolist(), JaxStrategy.reduce(me, program_sums, reduce_op="sum") is program_sums

    assert _on_every_host([None, None], reduce) == [([3.0, 20.0], [1.5], True)] * 2


def test_the_stop_agreement_leaves_no_keys_behind_in_the_store():
    """Each gather deletes the host's key of the one before, so a long run's store does not grow a key a step."""
    channels = _channels(2)
    _on_every_host(channels, _agreeing([[False] * 50, [False] * 50]))
    assert channels[0].store.num_keys() <= 2 + 2  # the last gather's two keys, and the store's own bookkeeping


class _Module:
    def __init__(self, metrics=None):
        self.epoch_metrics = dict(metrics or {})


class _Checkpoint:
    path = None


class _Preemption:
    saved_to = None


def _trainer(tmp_path, metrics=None):
    return types.SimpleNamespace(
        lightning_module=_Module(metrics),
        logger=CSVLogger(tmp_path, name="run"),
        callbacks=[_Checkpoint(), object(), _Preemption()],
    )


def test_an_xla_mp_workers_results_come_back_to_the_parent(tmp_path):
    from xla_train.runtime.torch_xla.multiprocess import restore_worker_results, worker_results

    worker = _trainer(tmp_path, {"test_acc": 0.75, "val_loss": 0.5})
    (tmp_path / "run" / "version_0").mkdir(parents=True)  # an earlier run: the worker's logger takes version_1
    worker.logger.log_metrics({"train_loss": 1.25}, step=0)
    worker.logger.save()
    worker.callbacks[0].path = str(tmp_path / "last.ckpt")
    worker.callbacks[2].saved_to = str(tmp_path / "preempted.ckpt")

    results = pickle.loads(pickle.dumps(worker_results(worker)))  # what the launcher carries between processes
    parent = _trainer(tmp_path)
    restore_worker_results(parent, results)

    assert parent.lightning_module.epoch_metrics == {"test_acc": 0.75, "val_loss": 0.5}
    assert parent.callbacks[0].path == str(tmp_path / "last.ckpt")
    assert parent.callbacks[2].saved_to == str(tmp_path / "preempted.ckpt")
    assert parent.logger.version == worker.logger.version == 1  # not a third folder of its own
    assert parent.logger.log_dir == worker.logger.log_dir
    parent.logger.save()  # the parent's logger writes on: the worker's metrics stay in the file
    assert "train_loss" in (tmp_path / "run" / "version_1" / "metrics.csv").read_text()


def test_a_logger_state_round_trip_keeps_the_version_and_the_metrics_writer(tmp_path):
    from xla_train import compat

    logger = CSVLogger(tmp_path, name="run")
    logger.log_metrics({"val_acc": 0.5}, step=3)
    logger.save()
    state = pickle.loads(pickle.dumps(compat.logger_state(logger)))
    fresh = CSVLogger(tmp_path, name="run")
    compat.set_logger_state(fresh, state)
    assert fresh.version == 0 and fresh.experiment.metrics == logger.experiment.metrics
    fresh.log_metrics({"val_acc": 0.75}, step=4)
    fresh.save()
    text = (tmp_path / "run" / "version_0" / "metrics.csv").read_text()
    assert "0.5" in text and "0.75" in text


def test_the_rendezvous_finds_host_0_from_the_worker_list_without_a_device_program(monkeypatch):
    """On a TPU without MASTER_ADDR, torch_xla would find host 0 with a transfer over every device; coordinator()
    takes it from the slice's worker list instead (here GKE's variables, as xpk sets them)."""
    from xla_train.runtime.torch_xla.multihost import coordinator

    for key in ("MASTER_ADDR", "TPU_WORKER_HOSTNAMES", "TPU_SKIP_MDS_QUERY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert coordinator() is None  # off a TPU: torch_xla's localhost
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "tpu-host-0,tpu-host-1,tpu-host-2,tpu-host-3")
    assert coordinator() == "tpu-host-0"
    import os

    assert os.environ["MASTER_ADDR"] == "tpu-host-0"  # what torch_xla's rendezvous reads first
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.7")  # a launch that sets it wins
    assert coordinator() == "10.0.0.7"


def test_on_a_pod_only_host_0_writes_the_shared_compile_cache(tmp_path, monkeypatch):
    """Every host runs the same command with the same compile_cache=, usually on a shared file system: host 0
    writes and the others read only, so no entry is written twice or torn by two writers. (That the cache is then
    read back, the second run compiling nothing, is a TPU's to show: XLA:CPU cannot read it.)"""
    import torch_xla.runtime as xr

    from xla_train.runtime.torch_xla.plan import configure_compile_cache

    calls = []
    monkeypatch.setattr(xr, "initialize_cache", lambda path, readonly: calls.append((path, readonly)))
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "tpu-host-0,tpu-host-1")
    monkeypatch.delenv("CLOUD_TPU_TASK_ID", raising=False)
    for worker in ("0", "1"):
        monkeypatch.setenv("TPU_WORKER_ID", worker)
        configure_compile_cache(str(tmp_path / "cache"))
    assert calls == [(str(tmp_path / "cache"), False), (str(tmp_path / "cache"), True)]
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "tpu-host-0")  # one host: it writes
    assert configure_compile_cache(str(tmp_path / "cache")) is False


def test_the_compile_cache_is_on_by_default_on_a_tpu_each_host_its_own_and_off_on_xla_cpu(tmp_path, monkeypatch):
    """compile_cache=auto, the default: on a TPU the programs go to this machine's own cache folder, which every
    host of a pod writes (it is not shared); on XLA:CPU nothing is set up and nothing is said."""
    import warnings

    import torch_xla.runtime as xr

    from xla_train.runtime.torch_xla.plan import configure_compile_cache

    calls = []
    monkeypatch.setattr(xr, "initialize_cache", lambda path, readonly: calls.append((path, readonly)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "tpu-host-0,tpu-host-1")
    for worker in ("0", "1"):
        monkeypatch.setenv("TPU_WORKER_ID", worker)
        assert configure_compile_cache("auto") is False
    own = str(tmp_path / "home-cache" / "xla_train" / "xla_compile_cache")
    assert calls == [(own, False), (own, False)] and (tmp_path / "home-cache" / "xla_train").is_dir()
    assert configure_compile_cache("off") is None and len(calls) == 2
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto says nothing on XLA:CPU
        assert configure_compile_cache("auto") is None
    assert len(calls) == 2
