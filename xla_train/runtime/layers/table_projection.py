"""An RNN fed straight from an nn.Embedding projects the embedding table once instead of every token.

Layer 0's input projection E[ids] @ W_ih^T equals (E @ W_ih^T)[ids]: the IMDB recipe projects 10,000 table rows
where it projected 64,000 tokens a step, and its backward scatter-adds the gates' gradients into those rows and takes
two (V x E x 4H) matmuls, where it took two (N*T x E x 4H) ones before the same scatter. The same products, so the
same model: only the order of the sums differs. The scan swaps it in on XLA (runtime/layers/scan_rnn.py) where the table
has fewer rows than the batch has tokens, and only when the RNN reads the embedding's output itself: a hook tags that
output with the ids and the table, and the tag holds only while the tensor is unchanged (its version), so dropout or
a scale in between (a new tensor) or an in-place change (a new version) leaves the plain projection to run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xla_train import compat

TAG = "_xla_train_rows"  # on an embedding's output: (ids, the embedding, the output's version)
HANDLE = "_xla_train_rows_hook"  # on an nn.Embedding: its hook's handle, for untag_embeddings


def _tag(module: nn.Embedding, args: tuple, output: torch.Tensor) -> None:
    if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
        setattr(output, TAG, (args[0], module, compat.tensor_version(output)))


def tag_embeddings(model: nn.Module) -> None:
    """Tag the outputs of every nn.Embedding in `model` whose rows the table projection can stand in for. Not:
    max_norm (which renormalises the table inside the forward), sparse gradients, or gradients scaled by each id's
    frequency (which would scale W_ih's gradient too)."""
    for module in model.modules():
        if type(module) is not nn.Embedding or HANDLE in vars(module):
            continue
        if module.max_norm is None and not module.sparse and not module.scale_grad_by_freq:
            module.__dict__[HANDLE] = module.register_forward_hook(_tag)


def untag_embeddings(model: nn.Module) -> None:
    for module in model.modules():
        handle = module.__dict__.pop(HANDLE, None)
        if handle is not None:
            handle.remove()


def table_rows(x: torch.Tensor):
    """(ids, embedding) when x is an embedding's output, unchanged, with more tokens than table rows; else None."""
    tag = getattr(x, TAG, None)
    if tag is None:
        return None
    ids, embedding, version = tag
    if (
        compat.tensor_version(x) != version
        or tuple(ids.shape) != tuple(x.shape[:-1])
        or embedding.num_embeddings >= ids.numel()
    ):
        return None
    return ids, embedding


def projected_rows(ids: torch.Tensor, embedding: nn.Embedding, w_ih: torch.Tensor) -> torch.Tensor:
    """E[ids] @ w_ih^T as (E @ w_ih^T)[ids]. The padding row takes no gradient, as nn.Embedding's does, while its
    tokens still add to W_ih's, as they do through the embedding's output (nothing, when the row is zero)."""
    table, pad = embedding.weight, embedding.padding_idx
    if pad is not None:
        table = torch.cat([table[:pad], table[pad : pad + 1].detach(), table[pad + 1 :]])
    return F.embedding(ids, F.linear(table, w_ih))
