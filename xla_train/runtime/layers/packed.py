"""pack_padded_sequence inside a net that XLA runs: the padded batch kept whole, so the scan runs it masked.

nn packs a batch into the rows of its real steps, a number it reads from the lengths on the host: XLA would compile a
program per batch, and JAX cannot read a traced value at all. While a net holding a scan runs on XLA, its forward runs
under PackedInputs, a torch function mode: a 1-D integer tensor's .cpu() (the lengths) stays on the device and its
sort is counted out; pack_padded_sequence keeps the padded batch, time-major, as the data of N sequences at each of T
steps (one fixed shape) and records the lengths beside it; pad_packed_sequence gives the padded batch back. ScanRNN
(runtime/layers/scan_rnn.py) runs it under a mask of the lengths: nn's outputs, zero past each length, and its final
states, at each sequence's own last step. Any other recurrent module handed one is refused in one line: it would
read every step. docs/own_model.md, "Variable-length sequences".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence
from torch.overrides import TorchFunctionMode

from xla_train import compat
from xla_train.errors import ConfigError

WHAT_WORKS = (
    "hand a plain nn.LSTM, nn.GRU or nn.RNN (no proj_size, no forward of its own) the packed batch, or the padded "
    "ids themselves, whose padding the scan masks"
)
HOOKS = "_xla_train_packing_hooks"  # on a module whose forward may pack: its hooks' handles, for unwatch_packing
_ACTIVE: list[PackedInputs] = []


@dataclass
class Pack:
    """What a fixed-shape PackedSequence stands for: T steps of N sequences, of these lengths (on the device)."""

    batch_sizes: torch.Tensor
    lengths: torch.Tensor
    steps: int
    batch: int


def _lengths_like(t) -> bool:
    """A 1-D tensor of integers: what pack_padded_sequence's lengths are."""
    return isinstance(t, torch.Tensor) and t.dim() == 1 and t.dtype in _INTEGERS


_INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _names_host(args, kwargs) -> bool:
    """Whether Tensor.to's arguments name the host (the CPU) as the target device."""
    targets = [a for a in args if isinstance(a, (str, torch.device))] + [kwargs.get("device")]
    return any(t is not None and torch.device(t).type == "cpu" for t in targets)


class PackedInputs(TorchFunctionMode):
    """The mode a watched forward runs under (module docstring); `packs` holds this forward's packed batches."""

    def __init__(self) -> None:
        super().__init__()
        self.packs: dict[int, Pack] = {}
        self.depth = 0
        self.pack_op, self.pad_op, self.rnn_ops = compat.packing_ops()
        self.special = frozenset(
            (
                torch.Tensor.cpu,
                torch.Tensor.to,
                torch.Tensor.numpy,
                torch.sort,
                self.pack_op,
                self.pad_op,
                *self.rnn_ops,
            )
        )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self.special:  # every other op, as it is: what the forward's tracing pays for the mode
            return func(*args, **kwargs)
        pack, pad, rnns = self.pack_op, self.pad_op, self.rnn_ops
        if func is torch.Tensor.cpu and len(args) == 1 and not kwargs and _lengths_like(args[0]):
            return args[0]
        if func is torch.Tensor.numpy and _lengths_like(args[0]):  # .cpu().numpy(): the host's copy after all
            return args[0].cpu().numpy(**kwargs)
        if func is torch.Tensor.to and _lengths_like(args[0]) and _names_host(args[1:], kwargs):
            dtype = kwargs.get("dtype", next((a for a in args[1:] if isinstance(a, torch.dtype)), args[0].dtype))
            return args[0].to(dtype)
        if func is torch.sort and _lengths_like(args[0]) and not {"out", "dim"} & kwargs.keys() and len(args) == 1:
            return sort_by_counting(args[0], kwargs.get("descending", False))
        if func is pack:
            return self.pack(*args, **kwargs)
        if func is pad and self.packed(args[1]) is not None:
            return self.pad(*args, **kwargs)
        if func in rnns and any(self.packed(a) is not None for a in args):
            raise ConfigError(
                "a recurrent module that XLA cannot run as a scan (named in the warning above) got a "
                f"pack_padded_sequence batch, which it would read as every sequence full length on XLA; {WHAT_WORKS}"
            )
        return func(*args, **kwargs)

    def packed(self, batch_sizes) -> Pack | None:
        """The Pack a PackedSequence's batch_sizes belongs to, if this forward's pack_padded_sequence made it."""
        found = self.packs.get(id(batch_sizes)) if isinstance(batch_sizes, torch.Tensor) else None
        return found if found is not None and found.batch_sizes is batch_sizes else None

    def pack(self, input: torch.Tensor, lengths: torch.Tensor, batch_first: bool):  # noqa: A002 (torch's name)
        """pack_padded_sequence's op: (data, batch_sizes), the padded batch time-major as data, T steps of N."""
        x = input.transpose(0, 1) if batch_first else input
        steps, batch = x.shape[:2]
        batch_sizes = torch.full((steps,), batch, dtype=torch.int64, device="cpu")
        lengths = lengths.to(device=input.device, dtype=torch.int64)
        self.packs[id(batch_sizes)] = Pack(batch_sizes, lengths, steps, batch)
        return x.reshape(steps * batch, *x.shape[2:]), batch_sizes

    def pad(self, data, batch_sizes, batch_first: bool, padding_value: float, total_length: int):
        """pad_packed_sequence's op: (padded, lengths), padding_value past each length, total_length steps."""
        p = self.packed(batch_sizes)
        x = data.reshape(p.steps, p.batch, *data.shape[1:])
        keep = steps_kept(p.lengths, p.steps).reshape(p.steps, p.batch, *([1] * (x.dim() - 2)))
        x = torch.where(keep, x, padding_value)
        if total_length > p.steps:
            x = F.pad(x, (0, 0) * (x.dim() - 1) + (0, total_length - p.steps), value=padding_value)
        return (x.transpose(0, 1) if batch_first else x), p.lengths


def sort_by_counting(v: torch.Tensor, descending: bool):
    """torch.sort of a 1-D tensor (pack_padded_sequence's of the lengths, enforce_sorted=False), stable, each place
    counted by comparisons: torch_xla 2.9 aborts the process (shape.h "buffer != nullptr") when index_select reads
    sort's indices, as pack_padded_sequence then does."""
    n = torch.arange(v.shape[0], device=v.device)
    first = v[None, :] > v[:, None] if descending else v[None, :] < v[:, None]
    ahead = first | ((v[None, :] == v[:, None]) & (n[None, :] < n[:, None]))  # [i, j]: j goes before i
    order = torch.empty_like(n).scatter_(0, ahead.sum(1), n)
    return torch.return_types.sort((v.gather(0, order), order))


def steps_kept(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(T, N) bool: step t of sequence n is real (t < its length)."""
    return torch.arange(steps, device=lengths.device)[:, None] < lengths[None, :]


def padded_batch(packed: PackedSequence):
    """(x (T, N, *), lengths (N,), to_packed) of a PackedSequence, in its own (sorted) order: to_packed turns outputs
    (T, N, H) back into packed data. One this forward's pack_padded_sequence made is its padded batch as it was; any
    other is unpacked by its batch_sizes, which are on the host, so each distinct batch_sizes is a program of its own."""
    found = _ACTIVE[-1].packed(packed.batch_sizes) if _ACTIVE else None
    data = packed.data
    if found is not None:
        steps, batch = found.steps, found.batch
        return data.reshape(steps, batch, *data.shape[1:]), found.lengths, lambda out: out.reshape(steps * batch, -1)
    sizes = [int(s) for s in packed.batch_sizes.tolist()]
    steps, batch, rows = len(sizes), sizes[0], len(data)
    starts = [sum(sizes[:t]) for t in range(steps)]
    where = [[starts[t] + n if n < sizes[t] else rows for n in range(batch)] for t in range(steps)]  # rows: a zero
    real = [t * batch + n for t in range(steps) for n in range(sizes[t])]  # packed order: step by step
    index = torch.tensor(where, dtype=torch.int64).to(data.device)
    x = torch.cat([data, data.new_zeros(1, *data.shape[1:])])[index]
    lengths = torch.tensor([sum(s > n for s in sizes) for n in range(batch)], dtype=torch.int64).to(data.device)
    real_rows = torch.tensor(real, dtype=torch.int64).to(data.device)
    return x, lengths, lambda out: out.reshape(steps * batch, -1)[real_rows]


def _enter(module, args) -> None:
    if not _ACTIVE:
        mode = PackedInputs()
        mode.__enter__()
        _ACTIVE.append(mode)
    _ACTIVE[-1].depth += 1


def _leave(module, args, output) -> None:
    if _ACTIVE:
        _ACTIVE[-1].depth -= 1
        if _ACTIVE[-1].depth == 0:
            _ACTIVE.pop().__exit__(None, None, None)


def watch_packing(model: nn.Module, holds) -> None:
    """Run the forward of every module of `model` that holds a scan (`holds(module)`) under PackedInputs, once
    however deep they nest: one of them calls pack_padded_sequence, and which is not known."""
    for module in model.modules():
        if HOOKS not in vars(module) and holds(module):
            module.__dict__[HOOKS] = (
                module.register_forward_pre_hook(_enter),
                module.register_forward_hook(_leave, always_call=True),
            )


def unwatch_packing(model: nn.Module) -> None:
    for module in model.modules():
        for handle in module.__dict__.pop(HOOKS, ()):
            handle.remove()
