"""One path fits a rebuilt net and data module to a checkpoint: validate, test, resume and a split's prediction."""

from __future__ import annotations

from xla_train.errors import CheckpointError
from xla_train.models.reference import NetRef


def fit_checkpoint_to(block: dict, ours: NetRef, net, dm, ckpt, builder: str, advice: str = "") -> None:
    """Make a rebuilt net and data module take a checkpoint, or refuse in one line: validate, test, resume and a
    split's prediction all come through here. The net must be the checkpoint's (class, and init arguments where
    both are recorded); the data module adopts what the checkpoint records of its inputs (a text checkpoint's
    tokenizer, an image checkpoint's channel statistics), so the net sees inputs as it trained on them; the data
    must fit the net. `builder` names what built the net ("recipe NAME", "its run config PATH")."""
    theirs = NetRef.from_block(block, ckpt)
    if not theirs.same_net(ours):
        raise CheckpointError(
            f"{ckpt} holds a {theirs.name} net {theirs.init_args or ''}, but {builder} builds a {ours.name} net "
            f"{ours.init_args or ''}{advice}".replace("  ", " ")
        )
    dm.adopt(block)
    dm.check_net(net)
