"""Several hosts, one SPMD program: what a TPU pod slice adds to the single-host SPMD strategy.

Every host runs the same command and executes one compiled program in lockstep, so each loads only its share of
a global batch (torch_xla's `minibatch` sharding), and a device read by one host alone would hang the slice. The
few answers the hosts need from each other (the run folder, whether to stop, "the checkpoint is on disk") go over
the key-value store of torch_xla's `xla://` rendezvous (`StoreChannel`, runtime/hosts.py's channel): no device work, no extra program.
`coordinator()` sets MASTER_ADDR from the slice's worker list first: without it the rendezvous finds host 0 by a
transfer over every device (docs/scaling.md, "TPU pod slices").
"""

from __future__ import annotations

import atexit
import datetime
import pickle
import time
from xla_train.errors import HardwareError
from xla_train.runtime.hosts import HostChannel, HostTopology

WAIT = datetime.timedelta(minutes=10)  # host 0 may be writing a large checkpoint while the others wait


def host_topology() -> HostTopology:
    """This process's place in the runtime; starts the runtime, so call it after configure_pjrt."""
    import torch_xla.runtime as xr

    from xla_train.runtime.tpu_lock import starting_runtime

    with starting_runtime():  # a TPU that another process holds fails here, as one line
        topo = HostTopology(
            xr.process_index(),
            xr.process_count(),
            xr.addressable_runtime_device_count(),
            xr.global_runtime_device_count(),
        )
    if topo.local_devices * topo.process_count != topo.global_devices:
        raise HardwareError(
            f"this host has {topo.local_devices} XLA device(s) but the {topo.process_count} hosts "
            f"have {topo.global_devices} in all; data parallelism needs the same number on every "
            f"host"
        )
    return topo


def coordinator() -> str | None:
    """Host 0's address for the rendezvous store: MASTER_ADDR if the launch set it, else on a TPU the first of
    the slice's workers (process index = TPU worker id, so worker 0 runs process 0), set as MASTER_ADDR. Off a TPU
    torch_xla uses localhost. Returns what the rendezvous will use, None for torch_xla's default."""
    import os

    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    if os.environ.get("PJRT_DEVICE", "").strip().lower() != "tpu":
        return None
    from xla_train.runtime.torch_xla import compat as xla_compat

    os.environ["MASTER_ADDR"] = xla_compat.tpu_worker_hosts()[0]
    return os.environ["MASTER_ADDR"]


class StoreChannel(HostChannel):
    """runtime/hosts.py's channel over the rendezvous store: no device work."""

    def __init__(self) -> None:
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend  # noqa: F401  (registers the xla:// rendezvous)

        coordinator()  # host 0 without a device program
        store, self.rank, self.world = next(dist.rendezvous("xla://"))
        store.set_timeout(WAIT)
        self.store = dist.PrefixStore("xla_train", store)
        self._calls = 0
        self._gathered: str | None = None  # this host's key in its latest all_gather
        atexit.register(self._leave)

    def _key(self, what: str) -> str:
        self._calls += 1
        return f"{self._calls}/{what}"

    def broadcast(self, obj, src: int = 0, site: str = ""):
        key = self._key("broadcast")
        if self.rank == src:
            self.store.set(key, pickle.dumps((site, obj)))
        their_site, value = pickle.loads(self.store.get(key))
        if their_site != site:
            raise self.out_of_step(src, their_site, site)
        return value

    def all_gather(self, obj) -> list:
        key = f"{self._key('gather')}/{self.rank}"
        self.store.set(key, pickle.dumps(obj))
        values = [pickle.loads(self.store.get(f"{key.rsplit('/', 1)[0]}/{r}")) for r in range(self.world)]
        # Every host has now set its key here, so it has read all of the previous gather's: this host's key
        # there can go. The hosts gather after every training step, and the store would otherwise grow a key
        # a host a step for the whole run.
        if self._gathered is not None:
            self.store.delete_key(self._gathered)
        self._gathered = key
        return values

    def _leave(self) -> None:
        """Host 0 serves the store, so at exit it waits (a while) until every other host is done with it."""
        try:
            if self.rank:
                self.store.add("left", 1)
                return
            deadline = time.monotonic() + 120
            while self.store.add("left", 0) < self.world - 1 and time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:  # a host that already failed has nothing left to say
            pass
