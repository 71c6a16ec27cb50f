"""The engine on JAX: a LightningModule's steps (runtime/jax/step_program.py) as jitted JAX programs, through torchax.

The module stays a torch module on the host; its state (parameters, buffers, the optimizer's state, the epoch's
metric sums) lives on the JAX devices as arrays, replicated over a 1-D `data` mesh, and each batch is split along
that axis, so one program drives every device. The steps are pure functions of those arrays, kept apart from the
state they are run on; the engine places the arrays, jits and runs the steps, and keeps one execution in flight. The
state goes back into the torch module, as torch tensors on the CPU, when a checkpoint or the end of a fit needs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np
import torch

from xla_train.compat import mark_optimizer_stepped
from xla_train.errors import ProcessLost
from xla_train.runtime.jax import compat
from xla_train.runtime.jax.backend import COUNTS, PROGRAM_PREFIX
from xla_train.runtime.jax.multihost import watching
from xla_train.runtime.jax.placement import DataMesh, HostSums, host_array, whole
from xla_train.runtime.jax.step_program import StepProgram, untraceable_refused
from xla_train.runtime.functional_optimizer import FunctionalOptimizer
from xla_train.runtime.grouping import convolution_in
from xla_train.runtime.interface import Engine, StepModule
from xla_train.runtime.probe import platform_named


class JaxEngine(Engine):
    """One module's steps on `devices` JAX devices. `loop`: how K steps run ("unroll" or "while")."""

    def __init__(
        self, devices: Sequence, loop: str = "unroll", precision: str = "32", matmul_precision: str = "default"
    ):
        self.devices, self.loop = list(devices), loop  # every process's: one program over all of them
        self.data = DataMesh(self.devices)  # where the arrays live: the state replicated, each batch split
        self.lost = False  # another process ended: nothing more runs (ProcessLost)
        self.platform = platform_named(self.devices[0].platform)  # cpu, gpu or tpu
        self.env = compat.environment()
        self.autocast = "bfloat16" if precision in ("bf16", "bf16-mixed") else None
        # JAX's names for XLA's HIGH (a TPU: bf16 in three passes) and HIGHEST (float32), as torch_xla's; jax 0.10
        # has no "bfloat16_3x", which raised at the first trace
        self.matmul_precision = {"default": None, "high": "high", "highest": "highest"}[matmul_precision]
        self.module: StepModule | None = None
        self.program: StepProgram | None = None  # the module's steps as pure functions, made by bind
        self.state: dict | None = None  # "params", "buffers", "opt", "sums": the arrays the programs read and write
        self.seed = 0
        self._jitted: dict = {}
        self.compiler_options: dict = {}  # XLA's options for this module's programs, set by bind
        self._key = self._key_of(0)

    # --- the state ---------------------------------------------------------------------------------------------
    def bind(self, module: StepModule, seed: int) -> None:
        self.module, self.seed = module, int(seed)
        self._key = self._key_of(self.seed)
        self.program = StepProgram(module, self.env, self.autocast, self.matmul_precision)
        self.state, self._jitted = None, {}
        convolutions = convolution_in(module) is not None
        self.compiler_options = compat.cpu_compiler_options(convolutions) if self.platform == "cpu" else {}

    @property
    def opt(self) -> FunctionalOptimizer | None:
        """The functional optimizer, held by the step program that updates with it; None until one is taken."""
        return self.program.opt if self.program is not None else None

    def set_seed(self, seed: int) -> None:
        self.seed = int(seed)
        self._key = self._key_of(self.seed)

    def _key_of(self, seed: int):
        """The run's key as the program takes it: its data, replicated (a key made on one device of one process
        cannot go into a program over every process's devices); the program wraps it again."""
        import jax

        return self.data.replicate(np.asarray(jax.random.key_data(jax.random.key(seed))))

    def gather(self, a: np.ndarray) -> np.ndarray:
        """Every process's `a` (the same shape on each), stacked in process order: the collective behind what
        Lightning asks of several processes (runtime/jax/multihost.py's channel, the strategy's reduce)."""
        from jax.experimental import multihost_utils

        with self._watch():
            return np.array(multihost_utils.process_allgather(a))

    @contextlib.contextmanager
    def _watch(self):
        """Around a wait on the processes' programs: another process that ended is one line (multihost.watching)."""
        try:
            with watching(self.data.processes):
                yield
        except ProcessLost:
            self.lost = True
            raise

    def _put(self, tensors) -> list:
        return [self.data.replicate(host_array(t)) for t in tensors]

    def take_state(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """The module's (and the optimizer's) torch state to the devices; again after torch's side changed."""
        module = self.module
        self.state = {
            "params": self._put([p for _, p in module.named_parameters()]),
            "buffers": self._put([b for _, b in module.named_buffers()]),
            "opt": [],
            "sums": {},
            "loss": self.data.replicate(np.float32(0)),  # the last step's (step_loss)
        }
        if optimizer is not None:
            self.program.opt = FunctionalOptimizer(optimizer)
            self.state["opt"] = self._put([t.cpu() for t in self.opt.state()])  # zeros made on the host, as its params

    def ensure_state(self, optimizer=None) -> None:
        if self.state is None or (optimizer is not None and self.opt is None):
            self.take_state(optimizer)

    def drop_state(self) -> None:
        """Torch's side changed (a checkpoint was loaded into it): take it again before the next step."""
        self.state = None
        if self.program is not None:  # a checkpoint's weights load before the strategy's setup binds a module
            self.program.opt = None

    def sums(self, stage: str):
        """The stage's sums as an array: the module's (the device's, or fresh zeros)."""
        held = self.module.step_state(stage)[stage]
        if isinstance(held, HostSums):
            return held.array
        return self.data.replicate(host_array(held))

    def resident(self, train: bool) -> dict:
        """A training (or evaluation) step's other inputs (the data held on the device, the epoch's order) as device
        arrays, each uploaded once: the tables replicated, the order's rows split as a batch's are."""
        out = {}
        cache = self.__dict__.setdefault("_uploaded", {})
        for name, (array, batch_like) in self.module.program_inputs(train).items():
            if cache.get(name, (None,))[0] is not array:  # the array itself is kept, so its id is not reused
                sharding = self.data.batch if batch_like else self.data.replicated
                cache[name] = (array, self.data.put(host_array(torch.from_numpy(np.asarray(array))), sharding))
            out[name] = cache[name][1]
        return out

    def to_torch(self) -> None:
        """The devices' state back into the torch module and optimizer (host tensors, each its own dtype)."""
        if self.state is None:
            return
        COUNTS.reads += 1
        with torch.no_grad():
            for (_, p), a in zip(self.module.named_parameters(), self.state["params"]):
                p.copy_(torch.from_numpy(whole(a)))
            for (_, b), a in zip(self.module.named_buffers(), self.state["buffers"]):
                b.copy_(torch.from_numpy(whole(a)).to(b.dtype))
        if self.opt is not None and self.state["opt"]:
            self.opt.store([torch.from_numpy(whole(a)) for a in self.state["opt"]], 0)

    # --- jitting and running the step program ------------------------------------------------------------------
    def _jit(self, name: str, fn: Callable, **kwargs):
        import jax

        if name not in self._jitted:

            def program(*args):
                return fn(*args)

            program.__name__ = program.__qualname__ = f"{PROGRAM_PREFIX}{name}"  # how the compile counter knows it
            self._jitted[name] = jax.jit(program, compiler_options=self.compiler_options or None, **kwargs)
        return self._jitted[name]

    def _execute(self, name: str, fn: Callable, *args, **kwargs):
        """Call a jitted program; a step that cannot be one is one line (step_program.untraceable_refused)."""
        program = self._jit(name, fn, **kwargs)
        COUNTS.dispatched += 1
        with untraceable_refused(), self._watch():
            return program(*args)

    # --- running -----------------------------------------------------------------------------------------------
    def stack(self, batches: Sequence[Sequence[torch.Tensor]], k: int) -> list:
        """K batches (the first len(batches) real, the rest zeros), one device array per tensor of the batch, each
        (K, batch, ...) with the batch split over the mesh."""
        out = []
        for j in range(len(batches[0])):
            rows = [host_array(b[j]) for b in batches]
            rows += [np.zeros_like(rows[0])] * (k - len(rows))
            stacked = np.stack(rows)
            out.append(self.data.put(stacked, self.data.stacked if stacked.ndim >= 2 else self.data.replicated))
        return out

    def wait(self) -> None:
        """Until the programs dispatched so far have run; the time it takes is the device's, not the host's
        (JaxBackend.sync_clock)."""
        import time

        import jax

        t0, cpu0 = time.perf_counter(), time.thread_time()
        with self._watch():
            jax.block_until_ready(self.state)
        COUNTS.waited[0] += time.perf_counter() - t0
        COUNTS.waited[1] += time.thread_time() - cpu0

    def place(self, t: torch.Tensor):
        """One batch tensor on the mesh, split along dimension 0 (a scalar replicated)."""
        return self.data.put(host_array(t), self.data.batch if t.dim() else self.data.replicated)

    # --- a group of steps (runtime/interface.py) --------------------------------------------------------
    def optimizer(self, optimizer: torch.optim.Optimizer) -> FunctionalOptimizer:
        self.ensure_state(optimizer)
        return self.opt

    def start_group(self, batch, row, k: int) -> int:
        return 0  # jit traces at the first call; a step that reads the host is refused there (_execute)

    def step_key(self, step: int) -> int:
        return step  # folded into the run's key inside the program

    def after_step(self, optimizer, at_execution_end: bool) -> None:
        mark_optimizer_stepped(optimizer)

    def step_loss(self, read: bool) -> torch.Tensor | None:
        """A host tensor, read with the epoch's sums in one transfer, which the finite-loss check then takes without
        another; where no read is made anyway (`read` False) none, since a read here would wait for the program that
        JAX otherwise leaves running while the host readies the next (train). The wait is `wait`'s, so a step's host
        time (JaxBackend.sync_clock) leaves it out."""
        if not read:
            return None
        self.wait()
        COUNTS.reads += 1
        loss, sums = (whole(a) for a in (self.state["loss"], self.state["sums"]["train"]))
        self.module.load_step_state({"train": HostSums(self.state["sums"]["train"], np.asarray(sums, np.float32))})
        return torch.tensor(float(loss))

    def train(self, batches, rows: Sequence[Sequence[float]], steps: Sequence[int], k: int) -> None:
        """Run len(batches) <= k training steps as one program of k; the state stays on the devices, dispatched."""
        n = len(batches)
        self.state["sums"] = {"train": self.sums("train")}
        scalars = np.zeros((k, len(rows[0])), dtype=np.float32)
        scalars[:n] = rows
        numbers = np.zeros((k,), dtype=np.int32)
        numbers[:n] = steps
        args = (
            self.state,
            self.stack(batches, k),
            self.data.replicate(scalars),
            self.data.replicate(numbers),
            self.data.replicate(np.int32(n)),
            self._key,
            self.resident(train=True),
        )
        # One execution in flight, as torch_xla's sync keeps it: the next group's batches were sent while this one ran,
        # and the queue (and the device memory its inputs hold) never grows past one.
        self.wait()
        self.state = self._execute(
            f"train{k}",
            lambda *a: self.program.train_steps(*a, loop=self.loop),  # read as traced: set after bind (grouping)
            *args,
            donate_argnums=(0,),
            out_shardings=self.data.replicated,
        )
        self.module.load_step_state({"train": HostSums(self.state["sums"]["train"])})
        self.opt.steps_done += n

    def evaluate(self, method: str, stage: str, batch) -> None:
        """One evaluation step (validation_step, test_step): its sums stay on the devices."""
        sums = self.sums(stage)
        placed = [self.place(t) for t in batch]
        _, new = self._execute(
            f"{method}",
            lambda p, b, s, x, r: self.program.eval_step(method, stage, p, b, s, x, r),
            self.state["params"],
            self.state["buffers"],
            sums,
            placed,
            self.resident(train=False),
            out_shardings=self.data.replicated,  # the sums over the global batch, whole on every process
        )
        self.module.load_step_state({stage: HostSums(new)})

    def predict(self, batch):
        """module.predict_step on one batch; its outputs come back as host tensors."""
        import jax

        placed = [self.place(t) for t in batch]
        out, _ = self._execute(
            "predict_step",
            lambda p, b, x, r: self.program.eval_step("predict_step", "", p, b, None, x, r),
            self.state["params"],
            self.state["buffers"],
            placed,
            self.resident(train=False),
            out_shardings=self.data.replicated,
        )
        COUNTS.reads += 1
        return jax.tree.map(lambda a: torch.from_numpy(whole(a)), out)
