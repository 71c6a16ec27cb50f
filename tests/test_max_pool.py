"""runtime/layers/max_pool.py: max pooling over tiling windows on XLA:CPU gives torch's values and gradients exactly,
without select-and-scatter, and only where the windows tile the input."""

from __future__ import annotations

import pytest

from helpers import SCRIPTS, cli_env, path_with_tests, script_json


@pytest.fixture(scope="module")
def found():
    return script_json(SCRIPTS / "max_pool_on_xla.py", env=cli_env(1, PYTHONPATH=path_with_tests()))


def test_values_and_gradients_are_torchs_exactly_ties_and_cropped_edges_included(found):
    for name, case in found["exact"].items():
        assert case == {"swapped": True, "values": True, "grads": True}, name


def test_the_gradient_needs_no_select_and_scatter(found):
    assert found["ops"]["stock"]["select-and-scatter("] >= 1  # what the swap is for
    assert found["ops"]["swapped"] == {"select-and-scatter(": 0, "reduce-window(": 0, "scatter(": 0}


def test_only_tiling_windows_are_swapped_and_a_subclass_keeps_its_own_forward(found):
    assert found["which"] == [0, 1, 2, 3]
    assert found["own forward"] == [True, True, True]  # its values and gradients, through the swapped super()
    assert found["restored"]


def test_the_strategy_swaps_on_xla_cpu_and_gives_the_classes_back_at_teardown(found):
    assert found["in fit"] == [False, True, False, True]  # MaxPool2d and Linear swapped; Conv2d, Flatten not
    assert found["after fit"] == ["Conv2d", "MaxPool2d", "Flatten", "Linear"]
