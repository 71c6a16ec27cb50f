"""Several processes, one JAX program: what JAX's multi-controller runtime (one process a host of a pod slice) adds to
the engine. The few host-side answers Lightning shares between processes go over the engine's collectives
(`ProcessChannel`), and a collective that fails because another process ended is one line (`watching`).
"""

from __future__ import annotations

import atexit
import os
import pickle
import sys
from contextlib import contextmanager

import numpy as np

from xla_train.errors import ProcessLost
from xla_train.runtime.hosts import HostChannel


@contextmanager
def watching(processes: int):
    """Where the engine waits on the processes' programs: a collective that fails because another process ended (gloo
    on the CPU: "Connection closed by peer") ends this process in one line, not a traceback, and without JAX's
    shutdown, which would wait for the lost process to the heartbeat's timeout and then abort with pages of logs."""
    import jax

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
