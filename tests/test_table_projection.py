"""runtime/layers/table_projection.py: an RNN reading an nn.Embedding's output on XLA projects the embedding table instead of
every token, with nn's outputs and gradients, and only where its input is that output, unchanged.

The XLA checks run in one subprocess (the XLA runtime is fixed for a process's life) and report as JSON.
"""

from __future__ import annotations

from helpers import SCRIPTS, script_json


def test_an_rnn_fed_by_an_embedding_projects_its_table_with_nns_outputs_and_gradients():
    found = script_json(SCRIPTS / "table_projection_on_xla.py")
    for name in ("2-layer bidirectional LSTM", "GRU, time-major", "SentimentLSTM"):
        case = found[name]
        assert case["projected"], (name, case)  # the table path ran, in each direction of layer 0 alone
        assert case["max error"] < 1e-5, (name, case)
        assert case["hooks while swapped"] == 1 and case["hooks after restore"] == 0, (name, case)
    assert found["2-layer bidirectional LSTM"]["projected"] == [[9, 4], [9, 4]]  # (T, N) ids, both directions
    assert "d embedding.weight" in found["SentimentLSTM"]["gradients"]
    # Not the embedding's unchanged output, or not worth it: the plain projection, with nn's results.
    for name in ("scaled in place", "more rows than tokens"):
        assert found[name]["projected"] == [] and found[name]["max error"] < 1e-5, (name, found[name])
    assert found["dropout between"] == []
