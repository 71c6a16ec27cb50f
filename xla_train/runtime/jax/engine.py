"""The engine on JAX: a LightningModule's steps as jitted JAX programs, through torchax.

The module stays a torch module on the host; its state (parameters, buffers, the optimizer's state, the epoch's
metric sums) lives on the JAX devices as arrays, replicated over a 1-D `data` mesh, and each batch is split along
that axis, so one program drives every device. A training step is the module's own `training_step`, run by
torch.func.functional_call on torchax views of the arrays, differentiated by jax.value_and_grad and updated by
FunctionalOptimizer, so it computes what the torch_xla engine does. K steps are one program over the K stacked
batches: unrolled, or a While loop over the real steps. Each step draws its random numbers from the run's key folded with the step's
number, an input of the program, so dropout changes every step and a resumed run draws the same masks. The state goes
back into the torch module, as torch tensors on the CPU, when a checkpoint or the end of a fit needs it.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from xla_train.compat import mark_optimizer_stepped
from xla_train.errors import ConfigError, ProcessLost
from xla_train.runtime.jax import compat
from xla_train.runtime.jax.backend import COUNTS, PROGRAM_PREFIX
from xla_train.runtime.jax.multihost import watching
from xla_train.runtime.functional_optimizer import FunctionalOptimizer
from xla_train.runtime.grouping import convolution_in
from xla_train.runtime.interface import Engine, StepModule
from xla_train.runtime.probe import platform_named

DATA_AXIS = "data"


class _Hook(nn.Module):
    """functional_call's module: calls the named method of the wrapped module with the state it was given."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, method: str, *args):
        return getattr(self.module, method)(*args)


class HostSums:
    """A stage's metric sums, kept on the device and read on the host only when asked (`.cpu()`, as for a tensor),
    or already read with the step's loss (`host`: JaxEngine.step_loss), so asking again reads nothing."""

    def __init__(self, array, host: np.ndarray | None = None) -> None:
        self.array, self.host = array, host

    def cpu(self) -> torch.Tensor:
        if self.host is None:
            COUNTS.reads += 1
            self.host = whole(self.array).astype(np.float32)
        return torch.from_numpy(self.host.copy())


def whole(a) -> np.ndarray:
    """A replicated array on the host, read from this process's own copy: with several processes the array spans
    devices this one cannot address, and each holds all of it."""
    import jax

    with watching(jax.process_count()):
        return np.array(a.addressable_data(0))


def host_array(t: torch.Tensor) -> np.ndarray:
    """A host tensor as the numpy array JAX takes: int64 as int32 (JAX's 64-bit integers are off by default)."""
    a = t.detach().cpu().numpy()
    return a.astype(np.int32) if a.dtype == np.int64 else a


class JaxEngine(Engine):
    """One module's steps on `devices` JAX devices. `loop`: how K steps run ("unroll" or "while")."""

    def __init__(
        self, devices: Sequence, loop: str = "unroll", precision: str = "32", matmul_precision: str = "default"
    ):
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        self.devices, self.loop = list(devices), loop  # every process's: one program over all of them
        self.processes = jax.process_count()
        self.lost = False  # another process ended: nothing more runs (ProcessLost)
        self.platform = platform_named(self.devices[0].platform)  # cpu, gpu or tpu
        self.mesh = Mesh(np.array(self.devices), (DATA_AXIS,))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.batch = NamedSharding(self.mesh, PartitionSpec(DATA_AXIS))
        self.stacked = NamedSharding(self.mesh, PartitionSpec(None, DATA_AXIS))
        self.env = compat.environment()
        self.autocast = "bfloat16" if precision in ("bf16", "bf16-mixed") else None
        # JAX's names for XLA's HIGH (a TPU: bf16 in three passes) and HIGHEST (float32), as torch_xla's; jax 0.10
        # has no "bfloat16_3x", which raised at the first trace
        self.matmul_precision = {"default": None, "high": "high", "highest": "highest"}[matmul_precision]
        self.module: StepModule | None = None
        self.opt: FunctionalOptimizer | None = None
        self.state: dict | None = None  # "params", "buffers", "opt", "sums": the arrays the programs read and write
        self.seed = 0
        self._jitted: dict = {}
        self.compiler_options: dict = {}  # XLA's options for this module's programs, set by bind
        self._key = self._key_of(0)

    # --- the state ---------------------------------------------------------------------------------------------
    def bind(self, module: StepModule, seed: int) -> None:

        self.module, self.seed = module, int(seed)
        self._key = self._key_of(self.seed)
        self._hook = _Hook(module)
        self._params = [n for n, _ in module.named_parameters()]
        self._buffers = [n for n, _ in module.named_buffers()]
        self.state, self.opt, self._jitted = None, None, {}
        convolutions = convolution_in(module) is not None
        self.compiler_options = compat.cpu_compiler_options(convolutions) if self.platform == "cpu" else {}

    def set_seed(self, seed: int) -> None:
        self.seed = int(seed)
        self._key = self._key_of(self.seed)

    def _key_of(self, seed: int):
        """The run's key as the program takes it: its data, replicated (a key made on one device of one process
        cannot go into a program over every process's devices); the program wraps it again."""
        import jax

        return self.put(np.asarray(jax.random.key_data(jax.random.key(seed))), self.replicated)

    def put(self, a: np.ndarray, sharding):
        """A host array as the programs take it. Replicated, it is the same on every process; split over the mesh,
        it is this process's rows of the global array (its slice of each global batch, in process order)."""
        import jax

        if self.processes == 1:
            return jax.device_put(a, sharding)
        shape = list(a.shape)
        for dim, axis in enumerate(sharding.spec):
            if axis == DATA_AXIS:
                shape[dim] *= self.processes
        return jax.make_array_from_process_local_data(sharding, a, tuple(shape))

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
            with watching(self.processes):
                yield
        except ProcessLost:
            self.lost = True
            raise

    def _put(self, tensors) -> list:
        return [self.put(host_array(t), self.replicated) for t in tensors]

    def take_state(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """The module's (and the optimizer's) torch state to the devices; again after torch's side changed."""

        module = self.module
        self.state = {
            "params": self._put([p for _, p in module.named_parameters()]),
            "buffers": self._put([b for _, b in module.named_buffers()]),
            "opt": [],
            "sums": {},
            "loss": self.put(np.float32(0), self.replicated),  # the last step's (step_loss)
        }
        if optimizer is not None:
            self.opt = FunctionalOptimizer(optimizer)
            self.state["opt"] = self._put([t.cpu() for t in self.opt_state_on_host()])

    def opt_state_on_host(self) -> list[torch.Tensor]:
        """FunctionalOptimizer's state tensors, zeros before the first step, on the host."""
        out = []
        for p in self.opt.group["params"]:
            s = self.opt.optimizer.state[p]
            out += [s[k].cpu() if k in s else torch.zeros(p.shape, dtype=p.dtype) for k in self.opt.keys]
        return out

    def ensure_state(self, optimizer=None) -> None:
        if self.state is None or (optimizer is not None and self.opt is None):
            self.take_state(optimizer)

    def drop_state(self) -> None:
        """Torch's side changed (a checkpoint was loaded into it): take it again before the next step."""
        self.state, self.opt = None, None

    def sums(self, stage: str):
        """The stage's sums as an array: the module's (the device's, or fresh zeros)."""

        held = self.module.step_state(stage)[stage]
        if isinstance(held, HostSums):
            return held.array
        return self.put(host_array(held), self.replicated)

    def resident(self, train: bool) -> dict:
        """A training (or evaluation) step's other inputs (the data held on the device, the epoch's order) as device
        arrays, each uploaded once: the tables replicated, the order's rows split as a batch's are."""

        out = {}
        cache = self.__dict__.setdefault("_uploaded", {})
        for name, (array, batch_like) in self.module.program_inputs(train).items():
            if cache.get(name, (None,))[0] is not array:  # the array itself is kept, so its id is not reused
                sharding = self.batch if batch_like else self.replicated
                cache[name] = (array, self.put(host_array(torch.from_numpy(np.asarray(array))), sharding))
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

    # --- tracing -----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _torch(self, key=None, train: bool = True):
        """Torch code on torchax views: the module in train or eval mode, random ops drawing from `key`, bf16 where
        asked, and the module's mode and sums as they were afterwards."""
        import jax

        module = self.module
        was_training = module.training
        module.train(train)
        with contextlib.ExitStack() as stack:
            stack.enter_context(compat.host_tensors_as_constants())
            # Lightning evaluates under inference_mode, where torch hands composite ops (aten::batch_norm) to
            # torchax undecomposed, and torchax lowers only their parts.
            stack.enter_context(torch.inference_mode(False))
            stack.enter_context(self.env)
            stack.enter_context(warnings.catch_warnings())
            # int64 (ids, labels, .long()) is int32 in JAX unless x64 is on: what torch's int64 holds here fits
            warnings.filterwarnings("ignore", message="Explicitly requested dtype int64")
            if key is not None:
                stack.enter_context(compat.with_prng(self.env, key))
            if self.autocast is not None:  # a torch dtype: torchax casts with Tensor.to
                stack.enter_context(compat.with_autocast(self.env, torch.bfloat16))
            if self.matmul_precision is not None:
                stack.enter_context(jax.default_matmul_precision(self.matmul_precision))
            try:
                yield
            finally:
                module.train(was_training)

    def _call(self, method: str, params, buffers, *args):
        """module.<method>(*args) with `params` and `buffers` (torchax tensors) in place of its own."""
        state = {f"module.{n}": t for n, t in itertools.chain(zip(self._params, params), zip(self._buffers, buffers))}
        return torch.func.functional_call(self._hook, state, (method, *args), strict=True)

    def _train_step(self, state: dict, batch, scalars, step, key0, resident):
        """One training step, a pure function of its arrays."""
        import jax
        from torchax.interop import jax_view, torch_view

        key = jax.random.fold_in(jax.random.wrap_key_data(key0), step)

        def loss_of(params):
            with self._torch(key, train=True):
                buffers = list(torch_view(state["buffers"]))
                self.module.load_step_state({"train": torch_view(state["sums"]["train"])})
                with self.module.reading(torch_view(resident)):
                    loss = self._call("training_step", torch_view(params), buffers, tuple(torch_view(batch)), 0)
                sums = self.module.step_state("train")["train"]
                return jax_view(loss), (jax_view(buffers), jax_view(sums))

        (loss, (buffers, sums)), grads = jax.value_and_grad(loss_of, has_aux=True)(state["params"])
        with self._torch(key, train=True):
            params, opt = self.opt.update(
                list(torch_view(state["params"])),
                list(torch_view(grads)),
                list(torch_view(state["opt"])),
                torch_view(scalars),
            )
        new = {"params": jax_view(params), "buffers": buffers, "opt": jax_view(opt), "sums": {"train": sums}}
        return {**new, "loss": loss.astype("float32")}

    def _train_steps(self, state: dict, batches, scalars, steps, n, key0, resident):
        """The first n of K steps (the rest are padding), as one program."""
        import jax
        import jax.numpy as jnp

        k = steps.shape[0]
        if k == 1:
            return self._train_step(state, [b[0] for b in batches], scalars[0], steps[0], key0, resident)

        xs = (list(batches), scalars, steps)
        if self.loop == "while":  # a While loop over the n real steps: the padding runs no step

            def step_i(i, carry):
                batch, row, step = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), xs)
                return self._train_step(carry, batch, row, step, key0, resident)

            return jax.lax.fori_loop(0, n, step_i, state)

        def body(carry, xs):  # unrolled: a step past the real ones leaves the state as it was
            i, batch, row, step = xs
            new = self._train_step(carry, batch, row, step, key0, resident)
            return jax.tree.map(lambda a, b: jnp.where(i < n, a, b), new, carry), None

        state, _ = jax.lax.scan(body, state, (jnp.arange(k), *xs), unroll=k)
        return state

    def _eval_step(self, method: str, stage: str, params, buffers, sums, batch, resident):
        from torchax.interop import jax_view, torch_view

        with self._torch(train=False), self.module.reading(torch_view(resident)):
            if stage:
                self.module.load_step_state({stage: torch_view(sums)})
            out = self._call(method, torch_view(params), list(torch_view(buffers)), tuple(torch_view(batch)), 0)
            new = self.module.step_state(stage)[stage] if stage else None
            return jax_view(out), (jax_view(new) if new is not None else sums)

    def _jit(self, name: str, fn: Callable, **kwargs):
        import jax

        if name not in self._jitted:

            def program(*args):
                return fn(*args)

            program.__name__ = program.__qualname__ = f"{PROGRAM_PREFIX}{name}"  # how the compile counter knows it
            self._jitted[name] = jax.jit(program, compiler_options=self.compiler_options or None, **kwargs)
        return self._jitted[name]

    def _execute(self, name: str, fn: Callable, *args, **kwargs):
        """Call a jitted program; an op torchax cannot lower, or a read of a traced value, is one line."""
        import jax

        from torchax.tensor import OperatorNotFound

        program = self._jit(name, fn, **kwargs)
        COUNTS.dispatched += 1
        try:
            with self._watch():
                return program(*args)
        except (OperatorNotFound, NotImplementedError) as e:
            raise ConfigError(
                f"runtime=jax: torchax cannot run an op of this net ({str(e).strip().splitlines()[0][:160]}); "
                f"use runtime=torch_xla"
            ) from None
        except (
            jax.errors.ConcretizationTypeError,  # TracerBoolConversionError among them
            jax.errors.NonConcreteBooleanIndexError,
            jax.errors.TracerArrayConversionError,
            jax.errors.TracerIntegerConversionError,
        ) as e:
            raise ConfigError(
                "runtime=jax: the step reads a device value on the host while traced (an .item(), a Python branch "
                "on a tensor, or a shape that depends on the data such as x[mask]), which a compiled program cannot "
                f"do ({type(e).__name__}); keep shapes fixed, or use runtime=torch_xla"
            ) from None

    # --- running -----------------------------------------------------------------------------------------------
    def stack(self, batches: Sequence[Sequence[torch.Tensor]], k: int) -> list:
        """K batches (the first len(batches) real, the rest zeros), one device array per tensor of the batch, each
        (K, batch, ...) with the batch split over the mesh."""

        out = []
        for j in range(len(batches[0])):
            rows = [host_array(b[j]) for b in batches]
            rows += [np.zeros_like(rows[0])] * (k - len(rows))
            stacked = np.stack(rows)
            out.append(self.put(stacked, self.stacked if stacked.ndim >= 2 else self.replicated))
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
        return self.put(host_array(t), self.batch if t.dim() else self.replicated)

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
            self.put(scalars, self.replicated),
            self.put(numbers, self.replicated),
            self.put(np.int32(n), self.replicated),
            self._key,
            self.resident(train=True),
        )
        # One execution in flight, as torch_xla's sync keeps it: the next group's batches were sent while this one ran,
        # and the queue (and the device memory its inputs hold) never grows past one.
        self.wait()
        self.state = self._execute(
            f"train{k}", self._train_steps, *args, donate_argnums=(0,), out_shardings=self.replicated
        )
        self.module.load_step_state({"train": HostSums(self.state["sums"]["train"])})
        self.opt.steps_done += n

    def evaluate(self, method: str, stage: str, batch) -> None:
        """One evaluation step (validation_step, test_step): its sums stay on the devices."""

        sums = self.sums(stage)
        placed = [self.place(t) for t in batch]
        _, new = self._execute(
            f"{method}",
            lambda p, b, s, x, r: self._eval_step(method, stage, p, b, s, x, r),
            self.state["params"],
            self.state["buffers"],
            sums,
            placed,
            self.resident(train=False),
            out_shardings=self.replicated,  # the sums over the global batch, whole on every process
        )
        self.module.load_step_state({stage: HostSums(new)})

    def predict(self, batch):
        """module.predict_step on one batch; its outputs come back as host tensors."""
        import jax

        placed = [self.place(t) for t in batch]
        out, _ = self._execute(
            "predict_step",
            lambda p, b, x, r: self._eval_step("predict_step", "", p, b, None, x, r),
            self.state["params"],
            self.state["buffers"],
            placed,
            self.resident(train=False),
            out_shardings=self.replicated,
        )
        COUNTS.reads += 1
        return jax.tree.map(lambda a: torch.from_numpy(whole(a)), out)
