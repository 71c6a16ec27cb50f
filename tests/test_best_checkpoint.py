"""The best checkpoint: the highest val_acc with ties broken by the lower val_loss (monitor=val_loss: the lowest
val_loss, ties to the higher val_acc), never an epoch whose loss is not a number, and the run report says which
epoch it is and why."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import xla_train
from helpers import runtime_key
from xla_train.checkpoint import safe_load
from xla_train.cli.main import main
from xla_train.training.best_checkpoint import BestCheckpoint


def chosen(monitor: str, epochs: list[tuple[float, float] | None]) -> tuple[BestCheckpoint, list[bool]]:
    """Each epoch's (val_acc, val_loss) shown to the chooser in turn (None: the epoch ended before it validated, the
    last scores still in callback_metrics); which ones it would save as the best."""
    chooser = BestCheckpoint(monitor)
    module = SimpleNamespace(validated_epoch=None)
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(reduce_boolean_decision=lambda b: b), sanity_checking=False, lightning_module=module
    )
    saved = []
    for epoch, scores in enumerate(epochs):
        trainer.current_epoch = epoch
        if scores is not None:
            trainer.callback_metrics = {"val_acc": torch.tensor(scores[0]), "val_loss": torch.tensor(scores[1])}
            module.validated_epoch = epoch  # what the module records as it logs the epoch's val_*
        saved.append(chooser.check_monitor_top_k(trainer, trainer.callback_metrics[monitor]))
    return chooser, saved


EPOCHS = [(0.50, 1.00), (0.80, 0.50), (0.80, 0.30), (0.80, 0.40), (0.70, 0.10), (0.90, math.nan)]


def test_ties_in_val_acc_go_to_the_lower_val_loss_and_nan_is_never_the_best():
    chooser, saved = chosen("val_acc", EPOCHS)
    assert saved == [True, True, True, False, False, False]
    assert chooser.best_epoch == 2 and chooser.tied_with == [1, 3]
    assert chooser.why() == (
        "best checkpoint: epoch 3, the highest val_acc (0.8000); epochs 2, 4 tied on val_acc, this one has the "
        "lower val_loss (0.3000)"
    )


def test_monitor_val_loss_takes_the_lowest_loss_and_ties_go_to_the_higher_accuracy():
    chooser, saved = chosen("val_loss", [*EPOCHS[:5], (0.75, 0.10)])
    assert saved == [True, True, True, False, True, True]
    assert chooser.best_epoch == 5 and chooser.tied_with == [4]
    assert "the lowest val_loss (0.1000); epoch 5 tied on val_loss, this one has the higher val_acc" in chooser.why()


def test_without_ties_the_report_names_no_tie():
    chooser, _ = chosen("val_acc", [(0.5, 1.0), (0.6, 1.2)])
    assert chooser.why() == "best checkpoint: epoch 2, the highest val_acc (0.6000)"


def test_an_epoch_that_never_validated_is_neither_the_best_nor_a_tie():
    """max_steps ends the last epoch before its validation: the scores Lightning still holds are the last epoch's,
    which would be a tie with itself."""
    chooser, saved = chosen("val_acc", [(0.5, 1.0), (0.6, 1.2), None])
    assert saved == [True, True, False] and chooser.tied_with == [] and chooser.best_epoch == 1


def test_the_chooser_resumes_with_its_best_so_far():
    chooser, _ = chosen("val_acc", EPOCHS[:3])
    again = BestCheckpoint("val_acc")
    again.load_state_dict(chooser.state_dict() | {"best_k_models": {"best-epoch=3.ckpt": torch.tensor(0.8)}})
    assert again.best_scores == pytest.approx({"val_acc": 0.8, "val_loss": 0.3})
    assert (again.best_epoch, again.tied_with) == (2, [1])


def test_a_fit_whose_val_acc_flattens_keeps_the_epoch_of_the_lowest_loss(tmp_path, monkeypatch, capsys):
    """Two blobs a linear net separates at once: val_acc is 1.0 from the first epoch while val_loss goes on
    falling. The best checkpoint is the last epoch, whose val_loss is the lowest, not the first to reach 1.0."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    y = np.arange(200) % 2
    x = (rng.normal(size=(200, 4)) + 4.0 * (2 * y[:, None] - 1)).astype(np.float32)
    torch.manual_seed(0)  # an instance is built before fit, which does not seed it (as in Keras)
    net = torch.nn.Linear(4, 2)
    run = xla_train.fit(net=net, x=x, y=y, accelerator="cpu", epochs=4, batch_size=16, lr=0.01, val_fraction=0.2)
    accs = [h["val_acc"] for h in run.history]
    losses = [h["val_loss"] for h in run.history]
    assert accs == [1.0] * 4 and losses == sorted(losses, reverse=True), run.history
    assert run.checkpoint.endswith("best-epoch=4.ckpt")  # the 4th epoch, as the lines count: Lightning's 3
    assert safe_load(run.checkpoint)["epoch"] == 3
    out = capsys.readouterr().out
    assert "best checkpoint: epoch 4 (best-epoch=4.ckpt), the highest val_acc (1.0000); epochs 1, 2, 3 tied" in out


def test_monitor_is_one_of_the_two_metrics(capsys, runtime):
    assert main(["fit", "recipe=quickstart", runtime_key(runtime), "monitor=val_accuracy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "monitor" in err[0] and "val_acc" in err[0] and "val_loss" in err[0], err


@pytest.mark.parametrize("monitor", ["val_acc", "val_loss"])
def test_the_recipe_key_reaches_the_chooser(monitor, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(1)
    y = np.arange(64) % 2
    x = (rng.normal(size=(64, 4)) + 3.0 * (2 * y[:, None] - 1)).astype(np.float32)
    run = xla_train.fit(net=torch.nn.Linear(4, 2), x=x, y=y, accelerator="cpu", epochs=1, monitor=monitor)
    states = [v for k, v in safe_load(run.checkpoint)["callbacks"].items() if k.startswith("BestCheckpoint")]
    assert len(states) == 1 and states[0]["monitor"] == monitor
