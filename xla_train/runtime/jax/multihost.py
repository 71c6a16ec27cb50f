"""Several processes, one JAX program: JAX's multi-controller runtime, as a pod slice runs it (one process a host).

Every process runs the same command and joins the others with `jax.distributed.initialize` before JAX starts a
backend. JAX finds who is who on a Cloud TPU slice, under SLURM, Open MPI and Kubernetes; where nothing says,
JAX_COORDINATOR_ADDRESS (JAX's own name, which it reads too), JAX_NUM_PROCESSES and JAX_PROCESS_ID do, as the
launch sets them on each process. On the CPU the processes' collectives go over gloo. The engine's mesh then spans
every device of every process, and each process feeds its own slice of each global batch (runtime/jax/engine.py).
The few host-side answers Lightning shares between processes go over the engine's collectives (`ProcessChannel`).
"""

from __future__ import annotations

import atexit
import os
import pickle
import sys
from contextlib import contextmanager

import numpy as np

from xla_train.errors import ConfigError, HardwareError, ProcessLost
from xla_train.runtime.hosts import HostChannel, HostTopology

# How long a process waits to hear from the others once they have joined before JAX's coordination service declares
# one dead and ends every process: bounded, so that a process that dies leaves no other hanging.
HEARTBEAT_S = 60
STALE_S = 20  # xla_train's own watch (Watch): a process silent this long is named, in one line, before JAX's heartbeat
WAITING = [None]  # since when this process's main thread has waited on the processes' programs (watching), if it has
SAY_WHO = "JAX_COORDINATOR_ADDRESS=HOST:PORT (process 0's), JAX_NUM_PROCESSES and JAX_PROCESS_ID"


def _listed(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ConfigError(f"{name}={value!r} is not a whole number; set it to the {name[4:].lower().replace('_', ' ')}")
    return int(value)


def join(num_nodes: int, timeout_s: float) -> bool:
    """Join the other processes (num_nodes in all) before JAX starts a backend; False where this process runs alone.
    A process that does not join within `timeout_s` ends this one in one line naming it."""
    import jax

    from xla_train.runtime.jax import compat

    count, index = _listed("JAX_NUM_PROCESSES"), _listed("JAX_PROCESS_ID")
    if count is not None and count != num_nodes:
        raise HardwareError(
            f"num_nodes={num_nodes} but JAX_NUM_PROCESSES={count}; on runtime=jax num_nodes is the number of "
            f"processes: set num_nodes={count} on every process"
        )
    if num_nodes == 1:
        return False
    if jax.distributed.is_initialized():  # an earlier run in this process (a notebook) joined them
        return True
    if compat.backends_started():
        raise HardwareError(
            f"num_nodes={num_nodes}: JAX started its backends in this process before joining the other processes; "
            f"run in a new process"
        )
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # the CPU's collectives between processes
    # JAX's preemption service: its SIGTERM handler, set here, would swallow a SIGTERM that comes before xla_train's
    # own (training/resume.py: the process logged it and ran on), and it adds its own log lines to JAX's abort when
    # process 0 ends; xla_train's stop on SIGTERM is its own agreement between the processes.
    jax.config.update("jax_enable_preemption_service", False)
    kwargs = {}
    if count is not None:
        if index is None or not 0 <= index < count:
            raise ConfigError(f"JAX_PROCESS_ID={index} with JAX_NUM_PROCESSES={count}; set it to 0 to {count - 1}")
        kwargs = {"num_processes": count, "process_id": index}
        roll_call(os.environ.get("JAX_COORDINATOR_ADDRESS", ""), count, index, timeout_s)
    try:
        jax.distributed.initialize(
            initialization_timeout=max(1, int(timeout_s)), heartbeat_timeout_seconds=HEARTBEAT_S, **kwargs
        )
    except (ValueError, TypeError) as e:  # no cluster says who is who, and the variables do not either
        raise HardwareError(
            f"num_nodes={num_nodes} on runtime=jax, but no cluster (a Cloud TPU slice, SLURM, Open MPI, "
            f"Kubernetes) says which process this is ({e}); set {SAY_WHO} on each process"
        ) from None
    if count is None:  # a cluster said who is who: the processes have joined, and now watch each other
        roll_call(*compat.distributed_who(), timeout_s, joined=True)
    return True


def topology(num_nodes: int) -> HostTopology:
    """This process's place, once JAX's backends have started (asking starts them)."""
    import jax

    if jax.process_count() != num_nodes:
        raise HardwareError(
            f"num_nodes={num_nodes} but JAX's runtime joined {jax.process_count()} processes; set "
            f"num_nodes={jax.process_count()} on every process"
        )
    local, total = jax.local_device_count(), jax.device_count()
    return HostTopology(jax.process_index(), jax.process_count(), local, total)


def roll_call(coordinator: str, count: int, index: int, timeout_s: float, joined: bool = False) -> None:
    """Every process signs in on a store that process 0 serves at the coordinator's port + 1 (- 1 at the last port),
    before JAX's own join, whose timeout ends a process with a fatal log that names no one: a process missing after
    `timeout_s` is named here, in one line. Where a cluster said who is who it runs after JAX's join, at the address
    JAX resolved, for the Watch alone."""
    import datetime
    import time

    from torch.distributed import TCPStore

    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"JAX_COORDINATOR_ADDRESS={coordinator!r}; set it to process 0's HOST:PORT")
    at = int(port) + 1 if int(port) < 65535 else int(port) - 1
    if joined:  # JAX's join is behind them: only the store's port can keep a process from signing in
        late = f"could not be reached within {timeout_s:g} s; the processes watch each other there: open that port"
    else:
        late = f"did not join within {timeout_s:g} s; start every process with the same command and {SAY_WHO}"
    try:
        store = TCPStore(
            host,
            at,
            count,
            is_master=index == 0,
            timeout=datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except RuntimeError:  # torch's DistStoreError: process 0's store never answered
        raise HardwareError(f"process 0 of num_nodes={count} (at {host}:{at}) {late}") from None
    store.set(f"present/{index}", "1")
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [i for i in range(count) if not store.check([f"present/{i}"])]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if missing:
        raise HardwareError(f"process(es) {', '.join(map(str, missing))} of num_nodes={count} {late}")
    Watch(store, count, index).start()


class Watch:
    """Each process beats on the roll call's store every second and watches the others' beats, from a thread of its
    own: a process whose beat stops for STALE_S (it died, or hangs) ends every other in one line naming it, within a
    bounded time and before JAX's own heartbeat (HEARTBEAT_S) would abort them with pages of logs; process 0's store
    gone is process 0 gone (though JAX's own abort comes first there: process 0 serves its coordination service, whose
    end jax 0.10.2 answers at once with a fatal log that no supported setting replaces, docs/scaling.md). At exit a
    process says it is done, and process 0, which serves the store, waits (as long as the others beat) until every
    other is; one that left while this one still waits on their programs (it ended on an error of its own) ends this
    one after STALE_S too."""

    def __init__(self, store, count: int, index: int) -> None:
        import threading

        self.store, self.count, self.index = store, count, index
        self.others = [i for i in range(count) if i != index]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="xla_train-processes", daemon=True)
        self._seen: dict = {}  # process -> (its last beat, when this one saw it change)

    def start(self) -> None:
        atexit.register(self.leave)  # after JAX's own shutdown was registered: runs before it
        self.thread.start()

    def _beat(self) -> None:
        beat = 0
        while not self.stop.wait(1.0):
            beat += 1
            try:
                self.store.set(f"alive/{self.index}", str(beat))
                for i in self.others:
                    if self._stale(i):
                        self._lost(i, f"ended, or stopped answering for {STALE_S} s")
            except RuntimeError:  # the store's connection: process 0 serves it
                if not self.stop.is_set():
                    self._lost(0, "ended")

    def _stale(self, i: int) -> bool:
        import time

        now = time.monotonic()
        if self.store.check([f"done/{i}"]):  # it left (an error of its own, or the end): this one must not wait on it
            since = WAITING[0]
            return since is not None and not self.stop.is_set() and now - since > STALE_S
        beat = self.store.get(f"alive/{i}") if self.store.check([f"alive/{i}"]) else b""
        last, since = self._seen.get(i, (None, now))
        if beat != last:
            self._seen[i] = (beat, now)
            return False
        return now - since > STALE_S

    def _lost(self, i: int, how: str) -> None:
        print(
            f"xla_train: error: process {i} of num_nodes={self.count} {how}, so process {self.index} ends too; start "
            f"every process again with ckpt=last",
            file=sys.stderr,
            flush=True,
        )
        _leave(ProcessLost.exit_code)

    def leave(self) -> None:
        import time

        self.stop.set()
        self.thread.join(10)
        try:
            self.store.set(f"done/{self.index}", "1")
            if self.index:
                return
            self._seen = {}
            waiting = list(self.others)
            while waiting:  # process 0 serves the store: until every other is done, or has stopped beating
                waiting = [i for i in waiting if not self.store.check([f"done/{i}"]) and not self._stale(i)]
                time.sleep(0.1)
        except RuntimeError:  # a process that has already failed has nothing left to say
            pass


@contextmanager
def watching(processes: int):
    """Where the engine waits on the processes' programs: a collective that fails because another process ended (gloo
    on the CPU: "Connection closed by peer") ends this process in one line, not a traceback, and without JAX's
    shutdown, which would wait for the lost process to the heartbeat's timeout and then abort with pages of logs."""
    import time

    import jax

    WAITING[0] = time.monotonic()
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if processes == 1:
            raise
        me = jax.process_index()
        who = f"process {1 - me}" if processes == 2 else "another process"
        first = str(e).strip().splitlines()[0][:200]
        atexit.register(_leave, ProcessLost.exit_code)  # after JAX's own shutdown was registered: runs before it
        raise ProcessLost(
            f"{who} of num_nodes={processes} ended or stopped answering, so process {me} ends too ({first}); start "
            f"every process again with ckpt=last"
        ) from None
    finally:
        WAITING[0] = None


def _leave(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class ProcessChannel(HostChannel):
    """runtime/hosts.py's channel over the engine's collectives (`JaxEngine.gather`, an all-gather over the
    processes): a message is pickled, its length gathered, then its bytes, padded to a power of two so that few
    shapes (few programs) are compiled."""

    def __init__(self, engine) -> None:
        import jax

        self.engine, self.rank, self.world = engine, jax.process_index(), jax.process_count()

    def all_gather(self, obj) -> list:
        if isinstance(obj, bool):  # the stop agreement after every execution: one collective, not two
            return [bool(v) for v in self.engine.gather(np.array([obj], dtype=np.int32))[:, 0]]
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        sizes = self.engine.gather(np.array([data.size], dtype=np.int32))[:, 0]
        width = 1 << max(int(sizes.max()) - 1, 0).bit_length()
        padded = np.zeros(width, dtype=np.uint8)
        padded[: data.size] = data
        rows = self.engine.gather(padded)
        return [pickle.loads(rows[r, : sizes[r]].tobytes()) for r in range(self.world)]

    def broadcast(self, obj, src: int = 0, site: str = ""):
        sent = self.all_gather((site, obj if self.rank == src else None))
        their_site, value = sent[src]
        if their_site != site:
            raise self.out_of_step(src, their_site, site)
        return value

    def barrier(self) -> None:
        self.engine.gather(np.zeros(1, dtype=np.int32))
