"""runtime/layers/dropout.py: dropout on XLA:CPU keeps each element with probability 1 - p, independently, scaled as torch
scales it, decided by the step's seed, with one random number drawn per call instead of one per element."""

from __future__ import annotations

import itertools
import math

import pytest

from helpers import SCRIPTS, cli_env, path_with_tests, script_json

STEPS_APART = 1e-4  # two steps' losses under other masks: 1e-2 apart and more; under the same masks, equal


@pytest.fixture(scope="module")
def found():
    return script_json(SCRIPTS / "dropout_on_xla.py", env=cli_env(1, PYTHONPATH=path_with_tests()))


def test_one_random_number_a_call_instead_of_one_an_element(found):
    assert found["stock rng"] == ["u32[1048576]"], found["stock rng"]  # what the swap is for
    assert found["hashed rng"] == ["u64[1]"], found["hashed rng"]


def test_the_mask_puts_no_index_table_into_the_graph(found):
    """The elements' positions are device data made once, not an (n,) literal that a step traced anew (Lightning's
    own, one at a time) built and hashed on the host every time: most of that step's host time."""
    assert found["big constants"] == [], found["big constants"]


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
def test_each_element_is_kept_with_one_minus_p_independently_and_scaled_as_torch_scales(found, p):
    seen, q, n = found[str(p)], 1 - p, 1 << 20
    sigma = lambda prob: math.sqrt(prob * (1 - prob) / n)  # noqa: E731
    assert abs(seen["kept"] - q) < 6 * sigma(q), seen
    for pair in ("neighbours", "calls", "steps"):  # two draws both kept: q^2 if they are independent
        assert abs(seen[pair] - q * q) < 6 * sigma(q * q), (pair, seen)
    assert seen["values"] == [0.0, round(1 / q, 6)], seen
    assert seen["same seed"] and seen["differs"] == [True, True], seen


def test_gradient_eval_edges_inplace_and_a_subclass(found):
    assert found["grad"] and found["eval"] and found["p=1"] and found["p=0"] and found["inplace"]
    assert found["own forward"]


def test_the_strategy_swaps_only_nn_dropout_on_xla_cpu_and_restores_it(found):
    assert found["in fit"] == [True, True, False]  # Linear's gradient swap, Dropout's; Dropout2d is left alone
    assert found["after fit"] == ["Linear", "Dropout", "Dropout2d"]


def test_dropout_changes_every_step_and_repeats_from_the_seed(runtime, tmp_path):
    """Fits of probes.DropoutNet on one row repeated, at a learning rate that leaves its weights as they are and one
    step an epoch, in one process: each step's loss differs from every other (new masks each step); a later fit
    with the same seed repeats the losses, and one with another seed (the same weights: the net's are fixed) does
    not. torch_xla's device generator ignored the run's seed, so its masks followed the process, not the seed."""
    env = cli_env(1, PYTHONPATH=path_with_tests())
    first, again, other = script_json(
        SCRIPTS / "dropout_per_step.py", env=env, cwd=tmp_path, args=[runtime, tmp_path, 0, 0, 1]
    )
    for losses in (first, other):
        assert len(losses) == 4 and all(abs(a - b) > STEPS_APART for a, b in itertools.combinations(losses, 2)), losses
    assert again == first, (first, again)
    assert max(abs(a - b) for a, b in zip(first, other)) > STEPS_APART, (first, other)
