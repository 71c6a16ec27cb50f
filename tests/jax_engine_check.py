"""The JAX engine against eager torch, in a process of its own: `python jax_engine_check.py DEVICES CHECK` prints one
JSON line (tests/test_jax_runtime.py reads it). DEVICES CPU devices are made before JAX starts."""

import copy
import json
import os
import sys

import jax
import numpy as np
import torch

from xla_train.data.base import keep
from xla_train.data.batching import StreamedInputs
from xla_train.objective import make_optimizer
from xla_train.runtime.jax.engine import JaxEngine
from xla_train.training.module import Classifier

DEVICES, CHECK = int(sys.argv[1]), sys.argv[2]
LOOP = sys.argv[3] if len(sys.argv) > 3 else "unroll"  # how a program of K steps runs them
jax.config.update("jax_num_cpu_devices", DEVICES)
jax.config.update("jax_platforms", "cpu")


class BNNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.AvgPool2d(4),
            torch.nn.Flatten(),
            torch.nn.Linear(8 * 4 * 4, 10),
        )

    def forward(self, x):
        return self.body(x)


def classifier(net: torch.nn.Module, **hp) -> Classifier:
    module = Classifier(net=net, **hp)
    module.batch_inputs = StreamedInputs(keep)  # float inputs as they are
    return module


def batches(n: int, seed: int = 1) -> list:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 3, 16, 16, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(n)]


def engine_for(module, optimizer, seed: int = 0) -> JaxEngine:
    engine = JaxEngine(jax.devices()[:DEVICES], LOOP)
    engine.bind(module, seed)
    engine.ensure_state(optimizer)
    return engine


def train(engine, data, k: int, first_step: int = 0) -> None:
    for i in range(0, len(data), k):
        group = data[i : i + k]
        steps = list(range(first_step + i, first_step + i + len(group)))
        engine.train(group, [engine.opt.scalars(s + 1) for s in steps], steps, k)


def match() -> dict:
    torch.manual_seed(0)
    module = classifier(BNNet(), lr=0.05, optimizer="sgd", momentum=0.9)
    reference = copy.deepcopy(module)
    ref_opt = make_optimizer(reference.hparams, reference.parameters())
    engine = engine_for(module, make_optimizer(module.hparams, module.parameters()))
    data = batches(8)
    train(engine, data[:5], 1)
    train(engine, data[5:], 4, first_step=5)  # one program of K=4 running 3 real steps
    engine.to_torch()
    reference.train()
    for batch in data:
        ref_opt.zero_grad()
        reference.training_step(batch, 0).backward()
        ref_opt.step()
    params = dict(module.named_parameters())
    buffers, ref_buffers = dict(module.named_buffers()), dict(reference.named_buffers())
    stats = [n for n in buffers if "running" in n]
    tracked = buffers["net.body.1.num_batches_tracked"]
    return {
        "devices": len(engine.devices),
        "weights": max((params[n] - p).abs().max().item() for n, p in reference.named_parameters()),
        "running_stats": max((buffers[n] - ref_buffers[n]).abs().max().item() for n in stats),
        "num_batches_tracked": [int(tracked), str(tracked.dtype)],
        "stats_moved": (buffers["net.body.1.running_var"] - 1).abs().max().item(),
    }


class GRUNet(torch.nn.Module):
    """A two-layer bidirectional GRU over embedded ids, reading every output (mean over time)."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 8)
        self.gru = torch.nn.GRU(8, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.head = torch.nn.Linear(12, 10)

    def forward(self, ids):
        out, _ = self.gru(self.embedding(ids))
        return self.head(out.mean(1))


def rnn() -> dict:
    """The scan LSTM (masked, final state read) and GRU (every output read) against nn's own, after 3 SGD steps
    on embedded ids with padding in front; also that the swap leaves nn modules behind. Also what compiles as the
    LSTM's first program is traced and run (the engine's program, and any other: an op on constant operands run on
    its own while traced), and each net's XLA:CPU options, with and without a level in XLA_FLAGS."""
    import jax.monitoring

    from xla_train.models.lstm import SentimentLSTM
    from xla_train.runtime.jax.backend import BACKEND_COMPILE_EVENT, PROGRAM_PREFIX
    from xla_train.runtime.jax.recurrence import jax_recurrence
    from xla_train.runtime.layers.scan_rnn import restore_rnn, use_scan_rnn

    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: (
            compiled.append(str(kw.get("fun_name", ""))) if event == BACKEND_COMPILE_EVENT else None
        )
    )
    g = torch.Generator().manual_seed(3)
    out = {}
    # the GRU runs 5 time steps per loop iteration (a GPU's chunk is more than 1), which 12 steps leave over, and its
    # weight gradients as for a batch split over 8 devices (the LSTM's as on one: the steps and batch merged)
    for name, net, classes, chunk, split in (
        ("lstm", SentimentLSTM(50, 8, 6), 2, None, 1),
        ("gru", GRUNet(), 10, 5, 8),
    ):
        torch.manual_seed(0)
        module = classifier(net, lr=0.1, optimizer="sgd", momentum=0.9)
        reference = copy.deepcopy(module)
        ref_opt = make_optimizer(reference.hparams, reference.parameters())
        ids = torch.randint(1, 50, (8, 3, 12), generator=g)
        ids[:, :, :4] = 0  # padding in front, as the IMDB data pads
        data = [
            (ids[i], torch.randint(0, classes, (3,), generator=g) if classes > 2 else ids[i, :, -1] % 2)
            for i in range(3)
        ]
        start = {n: p.detach().clone() for n, p in module.named_parameters()}
        use_scan_rnn(module, verbose=False, recurrence=jax_recurrence(split), chunk=chunk)
        out[f"{name}_chunks"] = sorted({m.chunk for m in module.modules() if hasattr(m, "chunk")})
        engine = engine_for(module, make_optimizer(module.hparams, module.parameters()))
        compiled.clear()
        train(engine, data[:1], 1)  # the first program, traced and run
        engine.wait()
        out[f"{name}_first_compiles"] = list(compiled)
        train(engine, data[1:], 1, first_step=1)
        engine.to_torch()
        restore_rnn(module)
        for batch in data:
            ref_opt.zero_grad()
            reference.training_step(batch, 0).backward()
            ref_opt.step()
        params = dict(module.named_parameters())
        out[name] = max((params[n] - p).abs().max().item() for n, p in reference.named_parameters())
        out[f"{name}_moved"] = max(
            (params[n] - p).abs().max().item() for n, p in start.items() if "rnn" in n or "lstm" in n or "gru" in n
        )
        out[f"{name}_restored"] = not any("Scan" in type(m).__name__ for m in module.modules())
    for net, flags in (("lstm", ""), ("conv", ""), ("given", "--xla_backend_optimization_level=0")):
        os.environ["XLA_FLAGS"] = flags  # "given": the user's level
        out[f"{net}_options"] = engine_for(
            classifier(BNNet() if net == "conv" else SentimentLSTM(50, 8, 6)), None
        ).compiler_options
    out["prefix"] = PROGRAM_PREFIX
    out["packed"] = packed()
    return out


def packed() -> dict:
    """tests/helpers/packed.py's nets, which pack their padded batch (pack_padded_sequence, lengths .cpu(),
    enforce_sorted=False), with the scan on JAX, all in one jitted program of their outputs and gradients: what nn
    computes on the CPU, per case ({name: differences})."""
    import helpers.packed as cases
    from torchax.interop import jax_view, torch_view

    from xla_train.runtime.jax.compat import environment
    from xla_train.runtime.jax.recurrence import jax_recurrence
    from xla_train.runtime.layers.scan_rnn import use_scan_rnn

    nets, inputs, expected = {}, {}, {}
    for name in cases.CASES:
        ref, x, lengths, hx = cases.case_inputs(name)
        net = copy.deepcopy(ref)
        use_scan_rnn(net, verbose=False, recurrence=jax_recurrence(1))
        weights = [torch.randn_like(v) for k, v in cases.results(ref, x, lengths, hx, "cpu").items() if k != "lengths"]
        expected[name] = cases.on_host(cases.results(ref, x, lengths, hx, "cpu", weights))
        hxs = () if hx is None else hx if isinstance(hx, tuple) else (hx,)
        nets[name] = net, isinstance(hx, tuple), [n for n, _ in net.named_parameters()]
        arrays = {
            "params": [p.detach() for p in net.parameters()],
            "x": x,
            "hxs": list(hxs),
            "lengths": lengths.int(),
            "weights": weights,
        }
        inputs[name] = jax.tree.map(lambda t: jax.numpy.asarray(t.numpy()), arrays)

    def loss(differentiated, given):
        total, outputs = 0.0, {}
        with environment():
            for name, (net, lstm, names) in nets.items():
                a = torch_view({**given[name], **differentiated[name]})
                hx = None if not a["hxs"] else tuple(a["hxs"]) if lstm else a["hxs"][0]
                state = dict(zip(names, a["params"]))
                out, final, out_lengths = torch.func.functional_call(net, state, (a["x"], a["lengths"], hx))
                tensors = [out, *(final if isinstance(final, tuple) else (final,))]
                total = total + sum((t * w).sum() for t, w in zip(tensors, a["weights"]))
                outputs[name] = jax_view((tensors, out_lengths))
        return jax_view(total), outputs

    wrt = {n: {k: v for k, v in a.items() if k in ("params", "x", "hxs")} for n, a in inputs.items()}
    rest = {n: {k: v for k, v in a.items() if k not in wrt[n]} for n, a in inputs.items()}
    (_, outputs), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(wrt, rest)
    found = {}
    for name, (tensors, out_lengths) in outputs.items():
        host = jax.tree.map(lambda a: torch.from_numpy(np.array(a)), (tensors, out_lengths, grads[name]))
        (out, *states), out_lengths, d = host
        got = {"out": out, **{f"state {i}": s for i, s in enumerate(states)}, "d x": d["x"]}
        got.update({f"d hx {i}": h for i, h in enumerate(d["hxs"])})
        got.update({f"d {n}": g for n, g in zip(nets[name][2], d["params"])})
        found[name] = cases.differences(expected[name], {**got, "lengths": out_lengths})
    return found


def split() -> dict:
    """The scan LSTM's backward with its batch split over the devices: the collectives in the compiled program of its
    gradients, with the recurrence built for those devices and with one built for one device (whose weight gradient
    merges the steps and the batch), and how far the two programs' gradients are apart."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from xla_train.runtime.jax.compat import environment
    from xla_train.runtime.jax.recurrence import jax_recurrence
    from xla_train.runtime.layers.rnn_cells import CELLS

    t, n, h = 6, 2 * DEVICES, 4
    mesh = Mesh(jax.devices()[:DEVICES], ("batch",))
    keys = jax.random.split(jax.random.key(0), 3)
    batch = NamedSharding(mesh, PartitionSpec(None, "batch"))
    gx = jax.device_put(jax.random.normal(keys[0], (t, n, 4 * h)), batch)
    state = jax.device_put(jax.numpy.zeros((n, h)), NamedSharding(mesh, PartitionSpec("batch")))
    w_hh = jax.device_put(jax.random.normal(keys[1], (4 * h, h)), NamedSharding(mesh, PartitionSpec()))
    keep_all = jax.device_put(jax.numpy.ones((t, n, 1), bool), batch)
    out, grads = {}, {}
    for devices in (DEVICES, 1):
        recurrence = jax_recurrence(devices)

        def loss(gx, w_hh, recurrence=recurrence):
            with environment():
                views = torchax_views(gx, keep_all, state, state, w_hh)
                result = recurrence(CELLS["LSTM"], 1, *views)
            return jax_values(result[0]).sum() + jax_values(result[1]).sum()

        program = jax.jit(jax.grad(loss, argnums=(0, 1)))
        text = program.lower(gx, w_hh).compile().as_text()
        out[f"built_for_{devices}"] = sorted(
            {
                op
                for op in ("all-gather", "all-to-all", "collective-permute")
                if f" {op}(" in text or f" {op}-start(" in text
            }
        )
        grads[devices] = program(gx, w_hh)
    out["apart"] = max(float(abs(a - b).max()) for a, b in zip(grads[DEVICES], grads[1]))
    return out


def torchax_views(*arrays):
    from torchax.interop import torch_view

    return torch_view(arrays)


def jax_values(tensor):
    from torchax.interop import jax_view

    return jax_view(tensor)


print(json.dumps({"match": match, "rnn": rnn, "split": split}[CHECK]()))
