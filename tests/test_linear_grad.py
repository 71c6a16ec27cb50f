"""runtime/layers/linear_grad.py: nn.Linear on XLA gives stock autograd's gradients, with the weight's in its own shape."""

from __future__ import annotations

import pytest

from helpers import SCRIPTS, script_json


@pytest.fixture(scope="module")
def found():
    return script_json(SCRIPTS / "linear_grad_on_xla.py")


def test_the_swapped_layer_gives_stock_autograds_gradients_and_is_restored(found):
    for name, case in found["grads"].items():
        assert case["swapped"] and case["restored"], name
        assert all(a == b for a, b in case["shapes"].values()), case["shapes"]
        assert max(case["diff"].values()) < 1e-5, (name, case["diff"])


def test_the_weight_gradient_is_computed_in_the_weights_shape_with_no_transpose(found):
    assert found["transposes"]["stock"] >= 1  # what the swap is for: stock autograd's [in, out] product, transposed
    assert found["transposes"]["swapped"] == 0


def test_under_bf16_autocast_the_gradients_stay_float32_and_match_stock(found):
    assert found["autocast"]["dtypes"] == ["torch.bfloat16", "torch.float32"]
    assert found["autocast"]["diff"] < 1e-2


def test_a_subclass_with_its_own_forward_keeps_it_and_its_super_forward_is_swapped(found):
    which = found["which"]
    assert which["swapped"] == ["Linear", "Plain", "Scaled"] and which["scaled kept"]
    assert found["transposes"]["own forward"] == 0
    assert which["keys"] and which["isinstance"] and which["restored"]
