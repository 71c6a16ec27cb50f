"""nn.LSTM, nn.GRU and nn.RNN as XLA While loops, swapped in when a model runs on XLA.

XLA traces a recurrent layer step by step, so its compile time grows with the sequence length. Here each layer and
direction projects its whole input in one matmul, and a While loop (runtime/torch_xla/scan_loop.py) runs the cell's step
(runtime/layers/rnn_cells.py), `chunk` steps per iteration (the reverse direction loops over the time-flipped sequence).
The backward is a second loop written out per cell, not torch_xla scan's own autograd, which caches graphs whatever
requires_grad and needs torchax under SPMD; both loops are batch-parallel, and the weight gradients are one matmul
over all steps after them, so no collective runs inside a loop. The recurrent weight (and GRU's b_hh, which r
multiplies) rides in each loop's carry. ScanRNN holds the module's own Parameters under their names, so checkpoints
load into the nn module, and restore_rnn puts it back. What the scan cannot run (cells, proj_size, a subclass's own
forward) stays as it is, with one warning naming it (docs/hardware.md, "The LSTM on XLA").
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from xla_train.errors import ConfigError
from xla_train.runtime.layers.packed import padded_batch, steps_kept, unwatch_packing, watch_packing
from xla_train.runtime.layers.rnn_cells import CELLS
from xla_train.runtime.layers.table_projection import projected_rows, table_rows, tag_embeddings, untag_embeddings

# Time steps per loop iteration: 1, by measurement on XLA:CPU (docs/hardware.md). An iteration of XLA:CPU's While
# costs little beside the work in each iteration of the IMDB recipe's layer, so more steps per iteration saved
# nothing and compiled several times as long: each unrolled step is more kernels to compile. A runtime gives its
# own for another platform (runtime/jax/strategy.py's SCAN_CHUNKS: a GPU's iterations cost more), and the
# scan_chunk setting wins over both (to measure one on a TPU).
CHUNK = 1
_ONES: dict = {}


def device_ones(t: torch.Tensor, shape: tuple = (1, 1)) -> torch.Tensor:
    """Ones of `shape` on t's device, made once: a graph input, which XLA cannot fold away as it folds a constant."""
    key = (str(t.device), t.dtype, tuple(shape))
    if key not in _ONES:
        _ONES[key] = torch.ones(shape, dtype=t.dtype).to(t.device)
    return _ONES[key]


def sum_steps(t: torch.Tensor) -> torch.Tensor:
    """t (T, N, G) summed over steps and batch, as a product with ones: XLA:CPU's reduce over both read t at a third
    of the speed at the IMDB recipe's shapes. Contracting dims, not a reshape of
    (T, N) into one, so a batch split over devices stays split."""
    return torch.einsum("tn,tng->g", device_ones(t, t.shape[:2]), t)


class _AddBias(torch.autograd.Function):
    """gx (T, N, G) + b (G,), whose backward sums the gradient with sum_steps."""

    @staticmethod
    def forward(ctx, gx, b):
        return gx + b

    @staticmethod
    def backward(ctx, d):
        return d, sum_steps(d)


def pad_front(t: torch.Tensor, pad: int) -> torch.Tensor:
    """`pad` steps of zeros (False) in front of t (T, ...); F.pad lowers to one op even when pad is 0, so the graph
    is the same size whatever T % chunk is."""
    return F.pad(t, (0, 0) * (t.dim() - 1) + (pad, 0))


class ScanRNN(nn.Module):
    """nn.LSTM's, nn.GRU's or nn.RNN's forward (any layers, directions, bias, dropout), run as scans.

    Also takes MaskedLSTM's `mask` (N, T) (T for unbatched input): where it is False, every layer and direction
    leaves its state unchanged and outputs zeros, as if the step were absent (the reverse direction starts at the
    last kept step). A PackedSequence runs as its padded batch under such a mask (runtime/layers/packed.py).
    """

    def __init__(self, rnn: nn.RNNBase, recurrence=None, chunk: int | None = None):
        super().__init__()
        why = unrolled(rnn) if isinstance(rnn, nn.RNNBase) else (type(rnn).__name__, "")
        if why:
            raise ValueError(f"ScanRNN cannot run {why[0]}")
        self.mode, self.cell = rnn.mode, CELLS[rnn.mode]
        self.input_size, self.hidden_size, self.num_layers = rnn.input_size, rnn.hidden_size, rnn.num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = (
            rnn.bias,
            rnn.batch_first,
            float(rnn.dropout),
            rnn.bidirectional,
        )
        self.training = rnn.training
        self.chunk = chunk or CHUNK
        self.names = list(rnn._flat_weights_names)
        for name in self.names:
            setattr(self, name, getattr(rnn, name))  # the same Parameter, not a copy, in nn's order
        self.__dict__["replaced"] = rnn  # kept for restore_rnn, outside the module tree and the state dict
        # one layer and direction as the runtime scans it: torch_xla's While loops (runtime/torch_xla/recurrence.py)
        # or JAX's lax.scan (runtime/jax/recurrence.py), to one contract (recurrence.py's docstrings)
        self.__dict__["recurrence"] = recurrence

    def extra_repr(self) -> str:
        return (
            f"{self.mode}, {self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, bias={self.bias}, "
            f"batch_first={self.batch_first}, dropout={self.dropout}, bidirectional={self.bidirectional}"
        )

    def current(self) -> nn.RNNBase:
        """The replaced module, holding this one's Parameters and training mode."""
        rnn = self.replaced
        for name in self.names:
            setattr(rnn, name, getattr(self, name))  # nn.RNNBase keeps its flat weight list in step
        rnn.train(self.training)
        return rnn

    def forward(self, input, hx=None, mask=None):  # noqa: A002 (nn's argument name)
        if isinstance(input, PackedSequence):
            return self._packed(input, hx)
        lstm, batched = self.mode == "LSTM", input.dim() == 3
        rows = table_rows(input)  # (ids, embedding) when the input is an embedding's output: ids shaped as input
        if not batched:  # (T, E): a batch of one, time-major
            x = input.unsqueeze(1)
            hx = None if hx is None else tuple(h.unsqueeze(1) for h in hx) if lstm else hx.unsqueeze(1)
            rows = rows and (rows[0].unsqueeze(1), rows[1])
        else:
            x = input.transpose(0, 1) if self.batch_first else input  # (T, N, E)
            rows = rows and ((rows[0].transpose(0, 1) if self.batch_first else rows[0]), rows[1])
        t, n = x.shape[:2]
        if mask is None:
            keep = torch.ones(t, n, 1, dtype=torch.bool, device=x.device)
        else:
            keep = (mask.to(torch.bool).transpose(0, 1) if batched else mask.to(torch.bool)[:, None])[..., None]
        x, states = self._layers(x, keep, hx, rows)
        if not batched:
            x, states = x.squeeze(1), [s.squeeze(1) for s in states]
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (tuple(states) if lstm else states[0])

    def _packed(self, packed: PackedSequence, hx):
        """nn's forward on a PackedSequence: the padded batch, its steps past each length masked, in the packed
        (sorted) order; hx and the final states in the batch's own order, as nn permutes them."""
        x, lengths, to_packed = padded_batch(packed)
        keep = steps_kept(lengths, x.shape[0])[..., None]
        lstm, order, back = self.mode == "LSTM", packed.sorted_indices, packed.unsorted_indices
        if hx is not None and order is not None:
            hx = tuple(h.index_select(1, order) for h in hx) if lstm else hx.index_select(1, order)
        x, states = self._layers(x, keep, hx, None)
        if back is not None:
            states = [s.index_select(1, back) for s in states]
        out = PackedSequence(to_packed(x), packed.batch_sizes, order, back)
        return out, (tuple(states) if lstm else states[0])

    def _layers(self, x: torch.Tensor, keep: torch.Tensor, hx, rows):
        """Every layer and direction over x (T, N, E) where keep (T, N, 1): the last layer's outputs (T, N, D*H)
        and the final states, each (L*D, N, H)."""
        lstm, directions = self.mode == "LSTM", 2 if self.bidirectional else 1
        finals = []  # [layer 0 forward, layer 0 reverse, layer 1 forward, ...], as nn orders h_n
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:  # nn's dropout: on each layer's output but the last
                x = F.dropout(x, self.dropout, training=True)
            outs = []
            for d in range(directions):
                k = layer * directions + d
                state0 = None if hx is None else (hx[0][k], hx[1][k]) if lstm else (hx[k],)
                fed = rows if layer == 0 else None
                if d == 0:
                    out, final = self._direction(f"_l{layer}", x, keep, state0, fed)
                else:  # the reverse direction scans the time-flipped sequence
                    fed = fed and (fed[0].flip(0), fed[1])
                    out, final = self._direction(f"_l{layer}_reverse", x.flip(0), keep.flip(0), state0, fed)
                    out = out.flip(0)
                outs.append(out)
                finals.append(final)
            x = outs[0] if directions == 1 else torch.cat(outs, dim=-1)
        return x, [torch.stack([f[s] for f in finals]) for s in range(self.cell.states)]

    def _direction(self, suffix: str, x: torch.Tensor, keep: torch.Tensor, state0, rows=None):
        """One layer in one direction over x (T, N, E): its outputs (T, N, H) and final state. With rows, (ids (T, N),
        embedding) whose table x was gathered from, the table is projected instead (runtime/layers/table_projection.py)."""
        w_ih, w_hh = getattr(self, f"weight_ih{suffix}"), getattr(self, f"weight_hh{suffix}")
        # Under autocast the projection runs in bf16; the recurrence keeps the weights' dtype throughout.
        gx = F.linear(x, w_ih) if rows is None else projected_rows(*rows, w_ih)
        gx, weights = gx.to(w_hh.dtype), (w_hh,)
        if self.bias:
            b_ih, b_hh = getattr(self, f"bias_ih{suffix}"), getattr(self, f"bias_hh{suffix}")
            if self.cell.bias_in_loop:
                gx, weights = _AddBias.apply(gx, b_ih), (w_hh, b_hh)
            else:
                gx = _AddBias.apply(gx, b_ih + b_hh)
        if state0 is None:
            state0 = [gx.new_zeros(x.shape[1], self.hidden_size) for _ in range(self.cell.states)]
        if self.recurrence is None:
            raise ConfigError(
                "ScanRNN runs on an XLA runtime's recurrence; use_scan_rnn(module, recurrence=...) is given it by the "
                "runtime that swaps it in (runtime/torch_xla/recurrence.py, runtime/jax/recurrence.py)"
            )
        out, *final = self.recurrence(self.cell, self.chunk, gx, keep, *(s.to(gx.dtype) for s in state0), *weights)
        return out, final


def _known_forwards() -> tuple:
    """Forwards the scan computes: nn's own, and torch_xla's GRU (which its import puts in nn.GRU's place until
    compat.keep_torch_gru puts torch's back; a GRU built meanwhile is swapped too, for the hand-written backward)."""
    from torch.nn.modules import rnn

    xla_gru = sys.modules.get("torch_xla.experimental.gru")
    return rnn.LSTM.forward, rnn.GRU.forward, rnn.RNN.forward, *((xla_gru.GRU.forward,) if xla_gru else ())


def _kind(module: nn.Module) -> str:
    base = next(c for c in type(module).__mro__ if c.__module__.startswith("torch.nn.modules"))
    return f"nn.{base.__name__}" if base is type(module) else f"{type(module).__name__}, an nn.{base.__name__}"


def unrolled(module: nn.Module) -> tuple[str, str] | None:
    """(what the module is, what to do) when the scan cannot stand in for this recurrent module, else None."""
    kind = _kind(module)
    if isinstance(module, nn.RNNCellBase):
        return kind, "run nn.LSTM, nn.GRU or nn.RNN over the whole sequence instead, which XLA runs as one loop"
    if getattr(module, "proj_size", 0):
        return f"{kind} with proj_size={module.proj_size}", "without proj_size it would run as one XLA loop"
    own = [n for n, _ in module.named_parameters(recurse=False)]
    if (
        module.mode not in CELLS
        or (type(module).forward not in _known_forwards() and not getattr(module, "scan_semantics", False))
        or own != list(module._flat_weights_names)
        or any(True for _ in module.children())
        or any(True for _ in module.buffers())
        or module._forward_hooks
        or module._forward_pre_hooks
    ):
        return (
            f"{kind} with its own forward, parameters, buffers, submodules or hooks",
            "hold a plain nn.LSTM, nn.GRU or nn.RNN inside it instead, which XLA runs as one loop",
        )
    return None


def use_scan_rnn(module: nn.Module, verbose: bool = True, recurrence=None, chunk: int | None = None) -> list[str]:
    """Replace, in place, every nn.LSTM, nn.GRU and nn.RNN inside `module` that ScanRNN can run; returns their paths.
    `recurrence`: the runtime's scan of one layer and direction; `chunk`: its time steps per loop iteration.

    Any other recurrent module (a cell, an LSTM with proj_size, a subclass with its own forward) is left as it is,
    with one warning naming it: XLA traces it step by step, so its compile time grows with the sequence length.
    """
    swapped, scans, warned = [], {}, set()
    for prefix, parent in list(module.named_modules()):
        for name, child in list(parent._modules.items()):  # named_children() would skip a second name of a module
            path = f"{prefix}.{name}" if prefix else name
            if not isinstance(child, (nn.RNNBase, nn.RNNCellBase)):
                continue
            why = unrolled(child)
            if why is None:
                if id(child) not in scans:  # a module shared by two parents becomes one ScanRNN
                    scans[id(child)] = ScanRNN(child, recurrence, chunk)
                setattr(parent, name, scans[id(child)])
                swapped.append(path)
            elif id(child) not in warned:
                warned.add(id(child))
                warnings.warn(
                    f"{path} ({why[0]}) is traced step by step on XLA, so its compile time grows with the "
                    f"sequence length; {why[1]}",
                    stacklevel=2,
                )
    if swapped:
        tag_embeddings(
            module
        )  # an RNN reading an embedding's output projects its table (runtime/layers/table_projection.py)
    if swapped or warned:  # a forward that packs its batch keeps it padded for the scan (runtime/layers/packed.py)
        recurrent = (ScanRNN, nn.RNNBase)
        watch_packing(
            module, lambda m: not isinstance(m, recurrent) and any(isinstance(c, recurrent) for c in m.modules())
        )
    if swapped and verbose:
        k = scan_chunk(module)
        per = f", {k} time steps per loop iteration" if k != "1" else ""
        print(
            f"XLA: {', '.join(swapped)} run{'s' if len(swapped) == 1 else ''} as a scan over time{per} "
            f"(compiled once whatever the length; same weights and state dict)",
            flush=True,
        )
    return swapped


def scan_chunk(module: nn.Module) -> str | None:
    """The time steps per loop iteration of the scans inside `module` ("4"; "1/4" where they differ), None without
    one: what a bench cell ran at, whichever runtime or platform chose it."""
    chunks = sorted({m.chunk for m in module.modules() if isinstance(m, ScanRNN)})
    return "/".join(map(str, chunks)) or None


def restore_rnn(module: nn.Module) -> list[str]:
    """Undo use_scan_rnn: each ScanRNN gives way to its nn module, which takes the current parameters.

    Moving a model to or from an XLA device creates new Parameter objects, so the
    ScanRNN's, not the ones the nn module was left with, hold the trained weights.
    """
    restored = []
    untag_embeddings(module)
    unwatch_packing(module)
    for prefix, parent in list(module.named_modules()):
        for name, child in list(parent._modules.items()):
            if isinstance(child, ScanRNN):
                setattr(parent, name, child.current())
                restored.append(f"{prefix}.{name}" if prefix else name)
    return restored
