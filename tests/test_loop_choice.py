"""K steps per execution and their loop, decided once (runtime/grouping.py, decide): one pure function of the
settings, the platform, the net and the run's length, which both XLA runtimes' strategies ask as the run is planned
and again once the net and the run are known.

On XLA:CPU execution_loop=auto lets the net decide: XLA:CPU runs a conv net's step inside a While body many times
slower than unrolled, and every other net measured (the IMDB LSTM, an MLP) compiled several times faster as a While
loop and ran no slower (docs/results.md, "The While loop against unrolled"). steps_per_execution=auto is the While
loop's K, or unrolled the payback rule on the run's length; an epoch shorter than auto's K is one execution each.
"""

from types import SimpleNamespace

import pytest
from torch import nn

from xla_train.errors import ConfigError
from xla_train.models import CifarCNN, SentimentLSTM
from xla_train.runtime.grouped_steps import GroupedSteps
from xla_train.runtime.grouping import (
    UNROLL_LONG_STEPS,
    UNROLLED_K,
    WHILE_K,
    Grouping,
    GroupingSettings,
    decide,
    grouping_of,
    loop_for_net,
)


def _lstm() -> SentimentLSTM:
    return SentimentLSTM(vocab_size=50, embed_dim=8, hidden_size=8)


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


CNN, LSTM, LONG, SHORT = CifarCNN(num_classes=10), _lstm(), 175_000, 480

# (K set, loop set, XLA:CPU, net, the run's steps, an epoch's) -> (K, loop, pending, loop pending, words in the note)
CASES = [
    # as planned, nothing known yet: a TPU's While loop; XLA:CPU unrolled until the net decides, K until the run does
    (("auto", "auto", False, None, None, None), (WHILE_K, "while", False, False, f"{WHILE_K} (auto)")),
    (("auto", "auto", True, None, None, None), (UNROLLED_K, "unroll", True, True, f"{UNROLLED_K} (auto)")),
    # XLA:CPU once the net is known: an LSTM loops with the While loop's K whatever the run's length
    (("auto", "auto", True, LSTM, None, None), (WHILE_K, "while", False, False, f"{WHILE_K} (auto)")),
    (("auto", "auto", True, LSTM, SHORT, 40), (WHILE_K, "while", False, False, f"{WHILE_K} (auto)")),
    # a conv net unrolls, and the run's length decides K: long enough pays back K=8, shorter runs one step a program
    (("auto", "auto", True, CNN, None, None), (UNROLLED_K, "unroll", True, False, f"{UNROLLED_K} (auto)")),
    (("auto", "auto", True, CNN, LONG, 175), (UNROLLED_K, "unroll", False, False, "enough to pay back")),
    (("auto", "auto", True, CNN, SHORT, 48), (1, "unroll", False, False, "traced once")),
    (("auto", "auto", True, CNN, UNROLL_LONG_STEPS, 48), (UNROLLED_K, "unroll", False, False, "enough to pay back")),
    # an epoch shorter than auto's K: one execution an epoch
    (("auto", "auto", False, LSTM, LONG, 12), (12, "while", False, False, "12 (auto: the steps of an epoch)")),
    (("auto", "auto", True, LSTM, LONG, 12), (12, "while", False, False, "12 (auto: the steps of an epoch)")),
    # what the user set is kept: K, the loop, or both
    ((4, "auto", True, LSTM, LONG, 175), (4, "while", False, False, "")),
    ((4, "auto", True, CNN, LONG, 175), (4, "unroll", False, False, "")),
    ((4, "auto", False, CNN, LONG, 175), (4, "while", False, False, "")),  # a TPU loops a conv net too
    (("auto", "unroll", True, LSTM, LONG, 175), (UNROLLED_K, "unroll", False, False, "enough to pay back")),
    (("auto", "while", True, CNN, SHORT, 48), (WHILE_K, "while", False, False, f"{WHILE_K} (auto)")),
    ((1, "auto", False, None, None, None), (1, "while", False, False, "")),
    ((8, "unroll", False, CNN, LONG, 175), (8, "unroll", False, False, "")),
]


@pytest.mark.parametrize("given, expected", CASES)
def test_k_and_the_loop_are_decided_once_from_the_settings_the_platform_the_net_and_the_run(given, expected):
    k_set, loop_set, host, net, run_steps, epoch = given
    g = decide(GroupingSettings(k_set, loop_set), host, net, run_steps, epoch)
    k, loop, pending, loop_pending, words = expected
    assert (g.k, g.loop, g.pending, g.loop_pending, g.auto) == (k, loop, pending, loop_pending, k_set == "auto"), g
    assert words in g.note and (words or not g.note), g
    assert ("auto: " in g.loop_note) == (loop_set == "auto" and host and net is not None), g


def test_a_k_set_longer_than_an_epoch_or_a_loop_that_is_not_one_is_refused():
    with pytest.raises(ConfigError, match="steps_per_execution=16 is more than the 12 training steps of an epoch"):
        decide(GroupingSettings(16, "while"), False, None, None, 12)
    with pytest.raises(ConfigError, match="execution_loop='scan'; use one of auto, unroll, while"):
        decide(GroupingSettings("auto", "scan"), False)
    from xla_train.runtime.settings import PlanSettings

    with pytest.raises(ConfigError, match="execution_loop='scan'; use one of auto, unroll, while"):
        PlanSettings(execution_loop="scan")  # as the run is planned, before any runtime starts


class _Strategy(GroupedSteps):
    """GroupedSteps' own decisions, without a Trainer: the engine only holds its loop."""

    def __init__(self, settings: GroupingSettings, host: bool = True) -> None:
        self.engine = SimpleNamespace(loop=None)
        self.plan_grouping(settings, host)


def test_the_strategy_decides_again_with_what_it_learns_and_its_engine_runs_the_loop():
    s = _Strategy(GroupingSettings())
    assert (s.execution_loop, s.engine.loop, s.steps_per_execution, s.grouping.loop_pending) == (
        "unroll",
        "unroll",
        UNROLLED_K,
        True,
    )
    s.fit_to_run(175, 175_000, _lstm())
    assert (s.execution_loop, s.engine.loop, s.steps_per_execution) == ("while", "while", WHILE_K)
    assert "no convolution" in s.grouping.loop_note and s.trace_once
    s.fit_to_run(12)  # an epoch shorter than K, the net and the run as known before: K shrinks, the loop stays
    assert (s.execution_loop, s.steps_per_execution) == ("while", 12)
    assert grouping_of(s) is s.grouping and grouping_of(object()) == Grouping()  # eager: one step at a time


def test_a_run_whose_steps_cannot_be_a_program_stays_one_step_at_a_time():
    s = _Strategy(GroupingSettings(), host=False)
    s._one_step_at_a_time("accumulate_grad_batches")
    s.fit_to_run(175, 175_000, _lstm())
    assert (s.steps_per_execution, s.trace_once) == (1, False) and "accumulate_grad_batches" in s.grouping.note
