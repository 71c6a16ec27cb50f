"""What hosts and worker processes tell each other, as fast round trips: the pod's stop agreement over a real
key-value store, and what an xla_mp worker hands back to the parent process (its metrics, logger and callbacks).

The real two-host and forked-worker runs are in tests/test_pods.py and tests/test_xla_mp.py (`-m slow`); these
check the pieces those runs depend on, in the default suite.
"""

import pickle
import threading
import types
from datetime import timedelta
from functools import partial

import torch.distributed as dist
from lightning.pytorch.loggers import CSVLogger

from xla_train.runtime.torch_xla.multihost import HostChannel, HostTopology
from helpers import free_port


def _channels(world: int) -> list[HostChannel]:
    """HostChannels over one TCPStore, as torch_xla's xla:// rendezvous would hand them to each host."""
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
        ch = HostChannel.__new__(HostChannel)  # the rendezvous itself needs a TPU pod's runtime
        ch.store, ch.rank, ch.world, ch._calls, ch._gathered = (
            dist.PrefixStore("xla_train", store),
            rank,
            world,
            0,
            None,
        )
        out.append(ch)
    return out


def _on_every_host(channels, requests: list[list[bool]]) -> list[list[bool]]:
    """Each host calls agree_to_stop once per step with its own requests; returns each host's answers."""
    from xla_train.runtime.torch_xla.spmd import SPMDStrategy

    answers = [[] for _ in channels]

    def host(rank: int) -> None:
        me = types.SimpleNamespace(topology=HostTopology(rank, len(channels), 1, len(channels)), channel=channels[rank])
        me.reduce_boolean_decision = partial(SPMDStrategy.reduce_boolean_decision, me)
        for requested in requests[rank]:
            answers[rank].append(SPMDStrategy.agree_to_stop(me, requested))

    threads = [threading.Thread(target=host, args=(r,)) for r in range(len(channels))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def test_pod_hosts_agree_to_stop_after_the_step_in_which_any_host_was_signalled():
    # host 1 receives the signal at step 3, host 2 at step 4; host 0 never does: every host stops after step 3
    requests = [[False] * 5, [False, False, True, True, True], [False, False, False, True, True]]
    answers = _on_every_host(_channels(3), requests)
    assert answers == [[False, False, True, True, True]] * 3


def test_the_stop_agreement_leaves_no_keys_behind_in_the_store():
    """Each gather deletes the host's key of the one before, so a long run's store does not grow a key a step."""
    channels = _channels(2)
    _on_every_host(channels, [[False] * 50, [False] * 50])
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
