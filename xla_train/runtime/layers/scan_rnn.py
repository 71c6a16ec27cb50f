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

import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from xla_train.errors import ConfigError
from xla_train.runtime.layers.rnn_cells import CELLS, backward_body, forward_body
from xla_train.runtime.torch_xla.scan_loop import scan_loop
from xla_train.runtime.layers.table_projection import projected_rows, table_rows, tag_embeddings, untag_embeddings

# Time steps per While iteration: 1, by measurement on XLA:CPU (docs/hardware.md). An iteration of XLA:CPU's While
# costs little beside the work in each iteration of the IMDB recipe's layer, so more steps per iteration saved
# nothing and compiled several times as long: each unrolled step is more kernels to compile. A runtime gives its
# own for another platform (runtime/jax/strategy.py's SCAN_CHUNKS: a GPU's iterations cost more); on a TPU
# (not measured here) XLA_TRAIN_SCAN_CHUNK sets another.
CHUNK = 1
CHUNK_ENV = "XLA_TRAIN_SCAN_CHUNK"  # another chunk, for every scan a process builds (to measure one on a TPU)
_ONES: dict = {}


def default_chunk(platform_chunk: int | None = None) -> int:
    """XLA_TRAIN_SCAN_CHUNK where set, else the runtime's chunk for its platform, else CHUNK."""
    value = os.environ.get(CHUNK_ENV, "").strip()
    if not value:
        return platform_chunk or CHUNK
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{CHUNK_ENV}={value!r} is not a number of time steps (a whole number, 1 or more)")
    return int(value)


def _ones(t: torch.Tensor, shape: tuple = (1, 1)) -> torch.Tensor:
    """Ones of `shape` on t's device, made once: a graph input, which XLA cannot fold away as it folds a constant."""
    key = (str(t.device), t.dtype, tuple(shape))
    if key not in _ONES:
        _ONES[key] = torch.ones(shape, dtype=t.dtype).to(t.device)
    return _ONES[key]


def _sum_steps(t: torch.Tensor) -> torch.Tensor:
    """t (T, N, G) summed over steps and batch, as a product with ones: XLA:CPU's reduce over both read t at a third
    of the speed at the IMDB recipe's shapes. Contracting dims, not a reshape of
    (T, N) into one, so a batch split over devices stays split."""
    return torch.einsum("tn,tng->g", _ones(t, t.shape[:2]), t)


class _AddBias(torch.autograd.Function):
    """gx (T, N, G) + b (G,), whose backward sums the gradient with _sum_steps."""

    @staticmethod
    def forward(ctx, gx, b):
        return gx + b

    @staticmethod
    def backward(ctx, d):
        return d, _sum_steps(d)


def _pad(t: torch.Tensor, pad: int) -> torch.Tensor:
    """`pad` steps of zeros (False) in front of t (T, ...); F.pad lowers to one op even when pad is 0, so the graph
    is the same size whatever T % chunk is."""
    return F.pad(t, (0, 0) * (t.dim() - 1) + (pad, 0))


class _Recurrence(torch.autograd.Function):
    """One layer, one direction: (cell, chunk, gx (T, N, G*H), keep (T, N, 1), *state0, *weights) -> (out (T, N, H),
    *final state), weights being (W_hh,) or, for GRU with bias, (W_hh, b_hh).

    Each While iteration runs `chunk` steps. A T the chunk does not divide gets masked steps in front: there the
    state passes through exactly unchanged (the mask's where(), not arithmetic) and the gradients are zero, so
    outputs, final states and gradients are those of the T steps. In front, because that is where the data's own
    padding is; the final state and the last outputs, which a classifier reads, come after the real steps either
    way.
    """

    @staticmethod
    def forward(ctx, cell, chunk, gx, keep, *tensors):
        t = gx.shape[0]
        k = min(chunk, t)
        pad = -t % k
        gx, keep = _pad(gx, pad), _pad(keep, pad)
        weights = tensors[cell.states :]
        carry, saved = scan_loop(forward_body(cell, k), k, (*tensors, _ones(gx)), (gx, keep))
        ctx.cell, ctx.n_weights, ctx.k, ctx.pad, ctx.state_shape = cell, len(weights), k, pad, carry[0].shape
        ctx.set_materialize_grads(False)  # outputs nothing reads get None, not a tensor of zeros to scan
        ctx.save_for_backward(keep, *weights, *saved, gx)
        return (cell.outputs(saved, keep, carry)[pad:], *carry[: cell.states])

    @staticmethod
    def backward(ctx, d_out, *d_state):
        cell, k, pad = ctx.cell, ctx.k, ctx.pad
        keep, *rest, gx = ctx.saved_tensors
        weights, saved = rest[: ctx.n_weights], rest[ctx.n_weights :]
        d_state = [weights[0].new_zeros(ctx.state_shape) if d is None else d for d in d_state]
        xs = (keep, *cell.back_inputs(saved)) if d_out is None else (_pad(d_out, pad), keep, *cell.back_inputs(saved))
        with torch.no_grad():
            body = backward_body(cell, k, d_out is not None)
            # d_gx is written over gx, which nothing reads after the forward loop: no zeros made for it, and one
            # (T, N, G) buffer fewer at the peak
            carry, (d_gx,) = scan_loop(body, k, (*d_state, weights[0], _ones(weights[0])), xs, reverse=True, into=(gx,))
        d_gh = cell.hidden_grads(d_gx, saved)  # the padding's gradients are zero
        # One matmul over all steps. This operand order makes XLA:CPU transpose h_prev (T, N, H) for it, where
        # "tng,tnh->gh" transposed d_gh (T, N, 4H), four times the data, and took about three times as long.
        d_weights = [torch.einsum("tnh,tng->hg", cell.h_prev(saved), d_gh).t()]
        if ctx.n_weights == 2:
            d_weights.append(_sum_steps(d_gh[pad:]))  # the steps' own length: b_ih's sum takes the same ones
        return (None, None, d_gx[pad:], None, *carry[: cell.states], *d_weights)


class ScanRNN(nn.Module):
    """nn.LSTM's, nn.GRU's or nn.RNN's forward (any layers, directions, bias, dropout), run as scans.

    Also takes MaskedLSTM's `mask` (N, T) (T for unbatched input): where it is False, every layer and direction
    leaves its state unchanged and outputs zeros, as if the step were absent (the reverse direction starts at the
    last kept step). A PackedSequence input runs through the replaced module's own forward, unrolled.
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
        self.chunk = default_chunk(chunk)
        self.names = list(rnn._flat_weights_names)
        for name in self.names:
            setattr(self, name, getattr(rnn, name))  # the same Parameter, not a copy, in nn's order
        self.__dict__["replaced"] = rnn  # kept for restore_rnn, outside the module tree and the state dict
        # _Recurrence's contract, run by torch_xla's While loops here, or by the JAX engine's lax.scan
        self.__dict__["recurrence"] = recurrence or _Recurrence.apply

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
            if not self.__dict__.setdefault("warned", False):
                self.__dict__["warned"] = True
                warnings.warn(
                    f"{type(self.replaced).__name__} got a PackedSequence, which XLA traces step by step, so its "
                    "compile time grows with the sequence length; a padded batch (and MaskedLSTM's mask) runs as "
                    "one loop",
                    stacklevel=2,
                )
            return self.current()(input, hx)
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
        directions = 2 if self.bidirectional else 1
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
        states = [torch.stack([f[s] for f in finals]) for s in range(self.cell.states)]
        if not batched:
            x, states = x.squeeze(1), [s.squeeze(1) for s in states]
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (tuple(states) if lstm else states[0])

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
    `chunk`: the runtime's time steps per iteration on its platform (XLA_TRAIN_SCAN_CHUNK still wins).

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
    for prefix, parent in list(module.named_modules()):
        for name, child in list(parent._modules.items()):
            if isinstance(child, ScanRNN):
                setattr(parent, name, child.current())
                restored.append(f"{prefix}.{name}" if prefix else name)
    return restored
