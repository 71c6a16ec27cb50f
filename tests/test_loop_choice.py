"""execution_loop=auto on XLA:CPU: the net decides the loop.

XLA:CPU runs a conv net's step inside a While body many times slower than unrolled, and every other net measured (the
IMDB LSTM, an MLP) compiled several times faster as a While loop and ran no slower (docs/results.md, "The While loop
against unrolled"). So a net with a convolution module unrolls, any other runs as a While loop, with the While
loop's K; what the user set is kept.
"""

from types import SimpleNamespace

import pytest
from torch import nn

from xla_train.models import CifarCNN, SentimentLSTM
from xla_train.runtime.grouping import UNROLLED_K, WHILE_K
from xla_train.runtime.torch_xla.backend import XLA
from xla_train.runtime.grouped_steps import GroupedSteps, Grouping, loop_for_net


class _Strategy(GroupedSteps):
    """GroupedSteps' own decisions, without a Trainer: the engine only holds its loop."""

    def __init__(self, grouping: Grouping) -> None:
        self.engine = SimpleNamespace(loop=grouping.loop)
        self.plan_grouping(grouping)

    @property
    def backend(self):
        return XLA


def _lstm() -> SentimentLSTM:
    return SentimentLSTM(vocab_size=50, embed_dim=8, hidden_size=8)


AUTO = Grouping(UNROLLED_K, "unroll", f"{UNROLLED_K} (auto)", True, "auto")  # XLA:CPU, both settings auto


class _Upsampler(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.Linear(4, 8), nn.Unflatten(1, (1, 8)), nn.ConvTranspose1d(1, 2, 3))


@pytest.mark.parametrize(
    "net, loop, named",
    [
        (CifarCNN(num_classes=10), "unroll", "nn.Conv2d"),
        (_Upsampler(), "unroll", "nn.ConvTranspose1d"),  # nested, and transposed
        (_lstm(), "while", "no convolution"),
        (nn.Sequential(nn.Flatten(), nn.Linear(12, 4)), "while", "no convolution"),
    ],
)
def test_a_net_with_a_convolution_unrolls_and_any_other_runs_a_while_loop(net, loop, named):
    chosen, why = loop_for_net(net)
    assert chosen == loop and named in why and why.startswith("auto: "), why


def test_the_while_loop_takes_the_while_loops_k_and_the_engine_runs_it():
    s = _Strategy(AUTO)
    s.fit_to_run(175, 175_000, _lstm())
    assert (s.execution_loop, s.engine.loop, s.steps_per_execution) == ("while", "while", WHILE_K)
    assert (s.grouping_note, s.auto_pending, s.loop_pending) == (f"{WHILE_K} (auto)", False, False)
    assert "no convolution" in s.loop_note
    s.fit_to_run(12, 12_000, None)  # an epoch shorter than K: auto's K shrinks to it, the loop stays
    assert (s.execution_loop, s.steps_per_execution) == ("while", 12)


def test_a_conv_net_stays_unrolled_and_the_runs_length_decides_its_k():
    s = _Strategy(AUTO)
    s.fit_to_run(48, 480, CifarCNN(num_classes=10))  # the quickstart's 480 steps: too few to pay back K=8
    assert (s.execution_loop, s.engine.loop, s.steps_per_execution) == ("unroll", "unroll", 1)
    assert "nn.Conv2d" in s.loop_note and "traced once" in s.grouping_note


def test_a_k_or_a_loop_the_user_set_is_kept():
    s = _Strategy(Grouping(4, "unroll", "", False, "auto"))  # K=4 set, the loop auto
    s.fit_to_run(175, 175_000, _lstm())
    assert (s.execution_loop, s.steps_per_execution, s.grouping_note) == ("while", 4, "")
    s = _Strategy(Grouping(UNROLLED_K, "unroll", f"{UNROLLED_K} (auto)", True, "unroll"))  # execution_loop=unroll
    s.fit_to_run(175, 175_000, _lstm())
    assert (s.execution_loop, s.steps_per_execution, s.loop_note) == ("unroll", UNROLLED_K, "")
