"""runtime/torch_xla/scan_loop.py and the chunked scans of runtime/layers/scan_rnn.py: K time steps per While iteration compute what
one step per iteration computes, forward and backward, also where K does not divide the sequence length (masked
steps are put in front) and with front padding masked, and the loop is built once per body and shapes.

The XLA checks run in one subprocess (the XLA runtime is fixed for a process's life) and report as JSON.
"""

from __future__ import annotations


import pytest

from helpers import SCRIPTS, script_json


@pytest.fixture(scope="module")
def on_xla() -> dict:
    return script_json(SCRIPTS / "scan_chunks_on_xla.py")


def test_the_loop_runs_k_steps_per_iteration_in_order_and_is_built_once(on_xla):
    """Carry and per-step outputs as a Python loop computes them, forwards and reversed, at two lengths; the
    second call with the same body and shapes reuses the built While computation."""
    assert len(on_xla["loop"]) == 4
    for case, found in on_xla["loop"].items():
        assert found["carry"] < 1e-5 and found["ys"] < 1e-5, (case, found)
        assert found["built"] == 1, (case, found)


def test_chunked_scans_compute_what_one_step_per_iteration_computes(on_xla):
    """Outputs, final states and the gradients of the input, hx and every parameter, for LSTM, GRU and RNN (two
    layers, both directions), front padding masked, at lengths the chunk does not divide."""
    assert len(on_xla["chunks"]) == 6
    for case, found in on_xla["chunks"].items():
        assert {"out", "state 0", "d input", "d weight_hh_l0", "d weight_ih_l0_reverse"} <= set(found), case
        for name, (shape, reference_shape, error) in found.items():
            assert shape == reference_shape and error < 1e-5, (case, name, shape, reference_shape, error)


def test_the_chunked_graph_does_not_grow_with_the_sequence_length(on_xla):
    """Counted in HLO instructions (a clock depends on the machine's load): one chunk of K steps is traced, whatever
    T and T % K, for every cell; the chunk of 4 is larger than one step's."""
    assert set(on_xla["hlo"]) == {"LSTM", "GRU", "RNN"}
    for cell, sizes in on_xla["hlo"].items():
        assert sizes["100"] == sizes["400"] == sizes["401"], (cell, sizes)
        assert sizes["100"] > 1.5 * sizes["chunk 1"], (cell, sizes)


def test_scan_chunk_is_a_setting_checked_as_the_run_is_planned():
    from torch import nn

    from xla_train.errors import ConfigError
    from xla_train.runtime.layers.scan_rnn import CHUNK, ScanRNN
    from xla_train.runtime.settings import PlanSettings

    assert ScanRNN(nn.LSTM(3, 4)).chunk == CHUNK
    assert ScanRNN(nn.LSTM(3, 4), chunk=4).chunk == 4  # a runtime's chunk, or the setting
    assert PlanSettings(scan_chunk=8).scan_chunk == 8 and PlanSettings().scan_chunk is None
    for bad in (0, -2, "eight", 2.5, True):
        with pytest.raises(ConfigError, match=f"scan_chunk={bad!r} is not a number of time steps"):
            PlanSettings(scan_chunk=bad)
