import numpy as np
import pytest
import torch

from xla_train.data.base import check_batch_size
from xla_train.data.batching import PAD_LABEL, ArrayDataset, BatchSampler
from xla_train.errors import ConfigError
from xla_train.objective import masked_stats


def test_train_batches_are_full_and_drop_the_remainder():
    s = BatchSampler(100, 16, train=True, seed=1)
    batches = list(s)
    assert len(batches) == len(s) == 6
    assert all(b.shape == (16,) for b in batches)
    flat = np.concatenate(batches)
    assert len(set(flat.tolist())) == 96 and flat.min() >= 0


def test_train_order_changes_with_epoch_and_repeats_with_seed():
    a, b = BatchSampler(50, 8, train=True, seed=3), BatchSampler(50, 8, train=True, seed=3)
    first = np.concatenate(list(a))
    a.set_epoch(1)
    assert not np.array_equal(first, np.concatenate(list(a)))
    assert np.array_equal(first, np.concatenate(list(b)))


@pytest.mark.parametrize("n,batch,world", [(100, 16, 1), (100, 8, 4), (7, 8, 2), (64, 8, 8)])
def test_eval_counts_every_sample_once_with_static_shapes(n, batch, world):
    shards = [list(BatchSampler(n, batch, train=False, rank=r, world_size=world)) for r in range(world)]
    assert len({len(s) for s in shards}) == 1
    flat = np.concatenate([b for s in shards for b in s])
    assert all(b.shape == (batch,) for s in shards for b in s)
    real = flat[flat >= 0]
    assert sorted(real.tolist()) == list(range(n))
    assert (flat == PAD_LABEL).sum() == len(flat) - n


def test_process_shares_of_a_training_batch_are_disjoint_and_cover_it():
    world, batch = 4, 8
    shards = [list(BatchSampler(200, batch, train=True, seed=0, rank=r, world_size=world)) for r in range(world)]
    for step in range(len(shards[0])):
        parts = [set(s[step].tolist()) for s in shards]
        assert sum(len(p) for p in parts) == len(set().union(*parts)) == world * batch


def test_dataset_marks_padding_rows_with_the_pad_label():
    ds = ArrayDataset(np.arange(10)[:, None], np.arange(10) % 3)
    x, y = ds[np.array([9, 0, -1, -1])]
    assert y.tolist() == [0, 0, PAD_LABEL, PAD_LABEL]
    assert x.shape == (4, 1)


@pytest.mark.parametrize("bad", [0, 12, 100, -8])
def test_batch_size_must_be_a_multiple_of_8(bad):
    with pytest.raises(ConfigError, match="multiple of 8"):
        check_batch_size(bad)


def test_padding_rows_change_neither_loss_nor_accuracy():
    torch.manual_seed(0)
    logits, y = torch.randn(5, 10), torch.tensor([1, 2, 3, 4, 5])
    loss, stats = masked_stats(logits, y)
    # Padding rows whose argmax is class 0, what label -1 clamps to: counted at all, they would count as right.
    padded_logits = torch.cat([logits, torch.randn(3, 10) + 100 * torch.eye(10)[0]])
    loss_p, stats_p = masked_stats(padded_logits, torch.cat([y, torch.full((3,), PAD_LABEL)]))
    torch.testing.assert_close(loss, loss_p)
    torch.testing.assert_close(stats, stats_p)
    assert stats[2] == 5
    assert torch.isclose(loss, torch.nn.functional.cross_entropy(logits, y))


def test_binary_logits_use_bce_and_threshold_at_zero():
    # The padding row's logit is negative: it predicts 0, what label -1 clamps to, so it must count nowhere.
    logits, y = torch.tensor([[2.0], [-1.0], [-0.5]]), torch.tensor([1, 1, PAD_LABEL])
    loss, stats = masked_stats(logits, y)
    assert stats.tolist()[1:] == [1.0, 2.0]
    expected = torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor([2.0, -1.0]), torch.tensor([1.0, 1.0]))
    assert torch.isclose(loss, expected)


def test_the_xla_device_loader_lets_lightning_reshuffle_each_epoch():
    from lightning.fabric.utilities.data import _set_sampler_epoch
    from torch.utils.data import DataLoader

    from xla_train.runtime.torch_xla.strategy import device_loader

    sampler = BatchSampler(64, 8, train=True, seed=0)
    loader = device_loader(
        DataLoader(ArrayDataset(np.zeros((64, 1)), np.zeros(64)), batch_size=None, sampler=sampler), "cpu"
    )
    _set_sampler_epoch(loader, 3)  # what Lightning's fit loop calls on the processed loader
    assert sampler.epoch == 3


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_the_multi_tensor_optimizer_takes_the_one_at_a_time_steps_and_keeps_their_state(kind):
    """make_optimizer's foreach=True changes how many calls an update takes, not what it computes or keeps:
    checkpoints, resume and steps_per_execution's FunctionalOptimizer read the same state either way."""
    from types import SimpleNamespace

    from xla_train.models.cnn import CifarCNN
    from xla_train.objective import make_optimizer

    hp = SimpleNamespace(lr=1e-3, optimizer=kind, momentum=0.9, nesterov=True, weight_decay=1e-4)
    torch.manual_seed(0)
    nets = [CifarCNN(), CifarCNN()]
    nets[1].load_state_dict(nets[0].state_dict())
    ours = make_optimizer(hp, nets[0].parameters())
    assert ours.defaults["foreach"] is True
    reference = type(ours)(nets[1].parameters(), **{**ours.defaults, "foreach": False})
    for _ in range(5):
        grads = [torch.randn_like(p) for p in nets[0].parameters()]
        for net, opt in zip(nets, (ours, reference)):
            for p, g in zip(net.parameters(), grads):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)
    s0, s1 = ours.state_dict(), reference.state_dict()
    assert s0["state"].keys() == s1["state"].keys()
    for i in s0["state"]:
        assert s0["state"][i].keys() == s1["state"][i].keys()
        for k, v in s0["state"][i].items():
            torch.testing.assert_close(v, s1["state"][i][k], atol=1e-7, rtol=1e-6)
            assert v.device == s1["state"][i][k].device  # Adam's step count stays on the CPU


class ReadsItsAnswer(torch.nn.Module):
    """A net whose answer is written in its input: column 0 is the class it predicts (or, with one output, its
    logit), so an evaluation's right answers are known before it runs."""

    def __init__(self, outputs: int):
        super().__init__()
        self.outputs = outputs
        self.unused = torch.nn.Parameter(torch.zeros(1))  # a Lightning module has parameters

    def forward(self, x):
        if self.outputs == 1:
            return x[:, :1]
        return torch.nn.functional.one_hot(x[:, 0].long(), self.outputs).float() * 3.0


@pytest.mark.parametrize("resident", [False, True], ids=["streamed", "on_device"])
@pytest.mark.parametrize("outputs", [3, 1], ids=["multiclass", "binary"])
def test_padded_evaluation_rows_a_net_would_score_right_count_nowhere(outputs, resident):
    """13 validation and test rows in batches of 8: 3 padding rows, which repeat row 0 as input and whose label -1
    would clamp to class 0. Row 0 is class 0 and the net gets it right, so a padding row counted anywhere would
    count as right: the epoch's accuracy and loss must be the 13 real rows' alone."""
    import lightning.pytorch as pl

    from xla_train.data.arrays import ArraysDataModule
    from xla_train.training.module import Classifier

    if outputs == 1:  # a logit: negative predicts 0, the class padding's label clamps to
        answer = np.array([-2.0, 1.5, -0.5, 2.0, -1.0, 0.5, -3.0, 1.0, -0.2, 0.7, -1.5, 2.5, -0.8])
        y = np.array([0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0])
        logits = torch.tensor(answer, dtype=torch.float32)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor(y, dtype=torch.float32))
        right = ((logits > 0).long() == torch.tensor(y)).sum().item()
    else:
        answer = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 2], dtype=np.float64)
        y = np.array([0, 1, 0, 0, 2, 2, 1, 1, 0, 0, 1, 1, 2])
        logits = ReadsItsAnswer(outputs)(torch.tensor(answer, dtype=torch.float32)[:, None])
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y))
        right = int((answer == y).sum())
    assert y[0] == 0 and 0 < right < 13  # row 0 right and class 0; some rows wrong
    x = answer.astype(np.float32)[:, None]
    dm = ArraysDataModule(batch_size=8, on_device=resident)
    dm.hold(x, y, validation_data=(x, y), test_data=(x, y))
    dm.place(auto_on=False, budget_bytes=2**30)
    assert dm.resident == resident
    model = Classifier(ReadsItsAnswer(outputs))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.validate(model, datamodule=dm, verbose=False)
    trainer.test(model, datamodule=dm, verbose=False)
    for split in ("val", "test"):
        assert model.epoch_metrics[f"{split}_acc"] == pytest.approx(right / 13, abs=1e-7), (split, right)
        assert model.epoch_metrics[f"{split}_loss"] == pytest.approx(loss.item(), abs=1e-6), split
