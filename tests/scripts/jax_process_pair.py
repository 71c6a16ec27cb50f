"""One of two processes of JAX's multi-controller runtime, joined as runtime=jax joins them (runtime/jax/multihost.py,
`join`), for tests/test_jax_pods.py: what a process does when the other ends, without the minutes of a fit. Who is who
comes from the environment the test gives (JAX's three variables, or a cluster's, as JAX reads them).

    jax_process_pair.py END WAIT_S [STALE_S]

END: a signal this process sends itself once joined (KILL, TERM), or `wait`: it waits WAIT_S seconds, then exits 0
(it outlived the other). STALE_S: the Watch's bound, shortened so that the test is quick."""

import os
import signal
import sys
import time

from xla_train.runtime.jax import multihost

end, wait_s = sys.argv[1], float(sys.argv[2])
if len(sys.argv) > 3:
    multihost.STALE_S = int(sys.argv[3])
multihost.join(2, 30)
print("joined", flush=True)
if end != "wait":
    os.kill(os.getpid(), getattr(signal, f"SIG{end}"))
time.sleep(wait_s)
print("outlived", flush=True)
