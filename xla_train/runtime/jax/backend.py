"""What the rest of the package may ask of the JAX runtime (runtime/backend.py's Backend): its compiles, counted from
jax.monitoring's events (a jitted function's cache size counts traces, not compiles), its RNG (the run's seed: every
step's key is derived from it and the step's number), its device and its memory."""

from __future__ import annotations

from xla_train.runtime.backend import Backend

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax/_src/dispatch.py, 0.10.2
# A program found in the persistent compile cache (jax/_src/compiler.py, 0.10.2). It names no program, but the
# backend-compile event that times the read comes right after it and does: a hit is the engine's when that one is.
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# The engine's programs are named so: what else compiles while one is traced (a constant folded on the host) adds to
# the compile time, not to the graphs a phase compiled.
PROGRAM_PREFIX = "xla_train_"


class JaxBackend(Backend):
    device_type = "jax"
    compiles_steps = groups_steps = True
    runs_on_host = False
    # A program is dispatched and runs on; the engine waits for it only as it dispatches the next. The clock waits at
    # each reading, as for CUDA: otherwise each reading held the execution before its own, and two timed executions
    # read about 0 and twice the step (bench/timing.py).
    waits_each_step = True

    def __init__(self, engine=None) -> None:
        self.engine = engine  # the engine of the strategy that holds this backend (its seed is the RNG state)

    @property
    def compiles(self) -> int:
        return COUNTS.compiles

    @property
    def reads(self) -> int:
        return COUNTS.reads

    def listen(self) -> None:
        COUNTS.listen()

    def sync_clock(self, cpu: bool = False, compiling: bool = False):
        """The seconds spent waiting for the device so far (as torch_xla's clock counts its syncs): a step's host time
        leaves them out. Compiles happen as a program is first called, outside any wait."""
        if compiling:
            return lambda: 0.0
        return lambda: COUNTS.waited[1 if cpu else 0]

    def counters(self) -> tuple[int, float, int]:
        return COUNTS.compiles, COUNTS.compile_s, COUNTS.reads

    def compile_seconds(self) -> float:
        return COUNTS.compile_s

    def executions(self) -> int:
        return COUNTS.dispatched

    def read_back(self) -> int:
        return COUNTS.hits

    def wait(self, device) -> None:
        engine = self.engine
        if engine is not None and engine.state is not None:
            engine.wait()

    def rng_state(self, device):
        return self.engine.seed if self.engine is not None else None

    def set_rng_state(self, device, state) -> None:
        if state is not None and self.engine is not None:
            self.engine.set_seed(int(state))

    def peak_mb(self, device) -> float | None:
        import jax

        stats = jax.local_devices()[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return peak / 2**20 if peak is not None else None

    def no_peak_memory(self, devices: int, described: str) -> str:
        return "n/a (JAX CPU)"

    def describe(self, device, cpu_model: str = "") -> str:
        import jax

        d = jax.local_devices()[0]
        kind = d.device_kind if d.platform != "cpu" else cpu_model
        return f"JAX {d.platform.upper()}" + (f" ({kind})" if kind else "")


class Counts:
    """This process's JAX compiles, reads, dispatches and waits: jax.monitoring's listeners are the process's, so
    the counts are too; every run's backend reads them."""

    def __init__(self) -> None:
        self.compiles, self.compile_s = 0, 0.0
        self.reads = 0  # device-to-host reads the engine made
        self.dispatched = 0  # programs dispatched (the engine counts them as it calls them)
        self.hits = 0  # programs read back from the persistent compile cache
        self.waited = [0.0, 0.0]  # wall and this thread's CPU seconds spent waiting for the device (JaxEngine.wait)
        self._listening = False

    def listen(self) -> None:
        """Count compiles from now on (once per process)."""
        if self._listening:
            return
        import jax.monitoring

        hit = [False]  # the next backend compile is a read from the persistent cache

        def on_duration(event: str, seconds: float, **kwargs) -> None:
            if event == BACKEND_COMPILE_EVENT:
                ours = f"({PROGRAM_PREFIX}" in str(kwargs.get("fun_name", ""))  # "jit(xla_train_...)"
                self.compiles += ours
                self.hits += ours and hit[0]
                self.compile_s += seconds
                hit[0] = False

        def on_event(event: str, **kwargs) -> None:
            hit[0] = hit[0] or event == CACHE_HIT_EVENT

        jax.monitoring.register_event_duration_secs_listener(on_duration)
        jax.monitoring.register_event_listener(on_event)
        self._listening = True


COUNTS = Counts()


def backend_for(accelerator: str) -> JaxBackend:
    """A run's backend before its strategy exists (a benchmark cell's): the process's counts, no engine yet."""
    return JaxBackend()


def backend_of(device_type: str) -> JaxBackend:
    return JaxBackend()
