"""runtime/layers/scan_rnn.py: nn.LSTM, nn.GRU and nn.RNN run on XLA as scans that compute what nn computes on the CPU,
whose compiled graph does not grow with the sequence length, and that hand the nn module back with the trained
weights. What the scan cannot run stays as it is, with one warning naming it.

The XLA checks run in one subprocess (the XLA runtime is fixed for a process's life) and report as JSON.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from helpers import SCRIPTS, cli_env, path_with_tests, script_json
from helpers import rnn_states
from helpers.packed import (
    CASES,
    LENGTHS,
    STEPS,
    PackedNet,
    case_inputs,
    differences,
    eager_recurrence,
    on_host,
    results,
)
from xla_train.runtime.layers.scan_rnn import ScanRNN, use_scan_rnn


@pytest.fixture(scope="module")
def on_xla() -> dict:
    return script_json(SCRIPTS / "scan_rnn_on_xla.py", env=cli_env(1, PYTHONPATH=path_with_tests()))


def test_scans_compute_what_nn_computes_forward_and_backward(on_xla):
    """Outputs and final states in nn's shapes and layer/direction order, and the gradients of the input, hx and
    every parameter, after a no-grad pass (Lightning's sanity check) traced first."""
    assert len(on_xla["equal"]) == 6
    for case, found in on_xla["equal"].items():
        for name, (shape, nn_shape, error) in found.items():
            assert shape == nn_shape and error < 1e-5, (case, name, shape, nn_shape, error)
        assert {"out", "state 0", "d input", "d weight_hh_l0"} <= set(found), case


def test_a_loss_that_reads_only_the_final_state_or_only_the_outputs_gets_nn_gradients(on_xla):
    """The backward runs without the outputs' gradient (no zeros made) or with zeros for the final state's."""
    assert len(on_xla["partial"]) == 2
    for case, found in on_xla["partial"].items():
        for name, (shape, nn_shape, error) in found.items():
            assert shape == nn_shape and error < 1e-5, (case, name, shape, nn_shape, error)
        assert {"d input", "d weight_hh_l0", "d bias_ih_l0"} & set(found), case


def test_dropout_runs_between_layers_in_training_only(on_xla):
    for case, found in on_xla["dropout"].items():  # eval mode equals nn (above), with the same dropout=0.5
        assert found["finite"] and found["output change"] > 1e-3, (case, found)
        assert found["last layer's state change"] > 1e-3 and found["layer 0's state change"] < 1e-6, (case, found)
        assert found["zero outputs"] == 0, (case, found)  # nothing dropped after the last layer
        assert found["eval after train vs nn"] < 1e-5, (case, found)


def test_a_mask_skips_steps_in_every_layer_and_direction(on_xla):
    assert on_xla["mask"] < 1e-5


@pytest.mark.parametrize("case", list(CASES))
def test_a_packed_batch_on_torch_xla_computes_what_nn_computes_with_no_read_and_no_new_program(on_xla, case):
    """tests/helpers/packed.py's cases on torch_xla: outputs, final states, lengths and gradients are nn's on the
    CPU; the forward and backward read nothing from the device (no lengths on the host, no shape from them), and a
    batch of other lengths runs the program already compiled."""
    found = on_xla["packed"][case]
    for name, (shape, nn_shape, error) in found["diffs"].items():
        assert shape == nn_shape and error < 1e-5, (name, shape, nn_shape, error)
    assert {"out", "state 0", "d x", "d rnn.weight_hh_l0", "lengths"} <= set(found["diffs"])
    assert found["read"] == 0 and found["compiled again"] == 0, found


def test_lengths_read_on_the_host_as_numpy_still_pack_on_torch_xla(on_xla):
    """lengths.cpu().numpy(): the .cpu() leaves them on the device, and the .numpy() reads them on the host after all
    (where torch would refuse an XLA tensor), so the net runs as it did, reading the host."""
    assert max(on_xla["numpy lengths"]) < 1e-5, on_xla["numpy lengths"]


def test_a_packed_sequence_made_outside_the_net_runs_as_the_scan_on_torch_xla(on_xla):
    out_error, h_error, shape = on_xla["packed outside"]
    assert out_error < 1e-5 and h_error < 1e-5 and shape == [19, 7], on_xla["packed outside"]


def test_bf16_autocast_keeps_the_recurrence_in_float32(on_xla):
    found = on_xla["autocast"]
    assert (
        "error" not in found
        and found["finite"]
        and found["dtypes"] == ["torch.float32"]
        and found["output error"] < 0.05
    ), found


def test_torch_xla_own_gru_is_swapped_and_restored(on_xla):
    assert on_xla["torch_xla's GRU"] == [True, ["gru"], ["gru"], True]


def test_restore_hands_back_the_nn_modules_with_the_trained_weights(on_xla):
    found = on_xla["restore"]
    assert found["swapped"] == ["lstm", "gru"] and found["restored"] == ["lstm", "gru"], found
    assert found["keys after the swap"] and found["keys on the device"] and found["keys after restore"], found
    assert found["the same objects"] and found["weights moved"] > 0 and found["error"] < 1e-5, found


def test_the_compiled_graph_does_not_grow_with_the_sequence_length(on_xla):
    """Counted in HLO instructions, not timed: a clock depends on the machine's load."""
    hlo = on_xla["hlo"]
    (scan_100, compile_100), (scan_400, compile_400) = hlo["scan 100"], hlo["scan 400"]
    unrolled_100, unrolled_400 = hlo["unrolled 100"][0], hlo["unrolled 400"][0]
    print(
        f"HLO instructions at T=100 / T=400: scan {scan_100} / {scan_400} (compiled in {compile_100} s / "
        f"{compile_400} s); unrolled nn.LSTM {unrolled_100} / {unrolled_400} (not compiled)"
    )
    assert abs(scan_400 - scan_100) <= 5, hlo
    assert unrolled_400 > 3 * unrolled_100 and unrolled_100 > 5 * scan_100, hlo


def test_the_backward_reads_the_gate_gradients_as_they_lie_and_scans_no_zeros(tmp_path):
    """In the program XLA:CPU compiles for a training step, W_hh's gradient transposes h_prev (T, N, H), not the
    gates' gradients (T, N, G*H), and the biases' gradients are matmuls with ones, not reductions over (T, N): at
    the IMDB recipe's shapes those took 27-33 and 5.6 ms, against 9-10 and 2.0 (docs/hardware.md). The loss reads
    the final state alone, so the backward loop gets no (T, N, H) of zeros for the outputs' gradient, and it writes
    the gates' gradients over gx, not over a (T, N, G*H) of zeros (the IMDB recipe's peak: 1,798-1,830 against
    1,555-1,569 MB). Read from XLA's dump of the optimised program; the step's loss is a sum whose gradient is no
    reduction either."""
    from helpers import cli_env

    dump = tmp_path / "dump"
    flags = f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=^$"
    found = script_json(SCRIPTS / "scan_rnn_compiled.py", env=cli_env(1, XLA_FLAGS=flags, DUMP=str(dump)))
    for cell, counts in found.items():
        assert counts["gate gradients transposed"] == 0, (cell, counts)
        assert counts["reduces"] == 0, (cell, counts)
        assert counts["dots"] >= 4, (cell, counts)
        assert counts["outputs' zeros"] == 0, (cell, counts)  # the loops' and the gradients' matmuls were found at all
        assert counts["gates' gradients' zeros"] == 0, (cell, counts)  # written over gx, not over zeros


class OwnLSTM(nn.LSTM):
    def forward(self, input, hx=None):  # noqa: A002
        return super().forward(input * 2, hx)


class NamedLSTM(nn.LSTM):  # a subclass that keeps nn.LSTM's forward: swapped
    pass


def test_modules_the_scan_cannot_run_get_one_warning_line_each():
    net = nn.Module()
    net.encoder = nn.LSTM(4, 4, num_layers=2, bidirectional=True)
    net.also_encoder = net.encoder  # one module under two names
    net.named = NamedLSTM(4, 4)
    net.decoder = nn.LSTMCell(4, 4)
    net.gru_cell = nn.GRUCell(4, 4)
    net.inner = nn.Sequential(nn.Linear(4, 4), nn.RNNCell(4, 4))
    net.projected = nn.LSTM(4, 8, proj_size=3)
    net.own = OwnLSTM(4, 4)
    keys = list(net.state_dict())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert use_scan_rnn(net, verbose=False) == ["encoder", "also_encoder", "named"]
    assert isinstance(net.encoder, ScanRNN) and net.also_encoder is net.encoder and list(net.state_dict()) == keys
    lines = [str(w.message) for w in caught]
    assert all("\n" not in line and "traced step by step on XLA" in line for line in lines), lines
    expected = {
        "decoder": "decoder (nn.LSTMCell) is traced step by step",
        "gru_cell": "gru_cell (nn.GRUCell)",
        "inner.1": "inner.1 (nn.RNNCell)",
        "projected": "projected (nn.LSTM with proj_size=3)",
        "own": "own (OwnLSTM, an nn.LSTM with its own forward",
    }
    assert len(lines) == len(expected), lines
    for path, start in expected.items():
        assert sum(line.startswith(start) for line in lines) == 1, (path, lines)
    cell = next(line for line in lines if line.startswith("decoder"))
    assert cell.endswith("run nn.LSTM, nn.GRU or nn.RNN over the whole sequence instead, which XLA runs as one loop")
    h, c = net.decoder(torch.randn(2, 4))  # left as they were: the model still runs
    assert type(net.decoder) is nn.LSTMCell and h.shape == (2, 4)


@pytest.mark.parametrize("case", list(CASES))
def test_a_packed_batch_runs_as_the_masked_scan_and_computes_what_nn_computes(case):
    """A net that packs its padded batch (pack_padded_sequence, lengths .cpu(), enforce_sorted=False) and unpacks the
    layer's output: with the scan swapped in (its recurrence a Python loop of the cell's step, on the CPU), outputs,
    final states at each sequence's own last step, lengths and every gradient are nn's on the packed batch. The
    layer is handed the padded batch whole (T steps of N), not the packed rows."""
    ref, x, lengths, hx = case_inputs(case)
    net = copy.deepcopy(ref)
    assert use_scan_rnn(net, verbose=False, recurrence=eager_recurrence) == ["rnn"]
    handed = []
    net.rnn.register_forward_pre_hook(lambda m, args: handed.append(tuple(args[0].data.shape)))
    weights = [torch.randn_like(v) for k, v in on_host(results(ref, x, lengths, hx, "cpu")).items() if k != "lengths"]
    found = differences(
        on_host(results(ref, x, lengths, hx, "cpu", weights)), results(net, x, lengths, hx, "cpu", weights)
    )
    for name, (shape, nn_shape, error) in found.items():
        assert shape == nn_shape and error < 1e-5, (name, shape, nn_shape, error)
    assert {"out", "state 0", "d x", "d rnn.weight_hh_l0", "lengths"} <= set(found)
    assert handed == [(len(LENGTHS) * STEPS, 3)], handed  # not sum(LENGTHS) rows: one shape whatever the lengths


def test_a_packed_sequence_made_outside_the_net_runs_as_the_scan_by_its_batch_sizes():
    """A PackedSequence that no forward of the net packed (made beforehand, so its rows are the real steps only) is
    unpacked by its batch_sizes, which are on the host, and comes back packed as nn's: the same rows and states."""
    ref, x, lengths, _ = case_inputs("GRU, 1 layer bidirectional, batch_first")
    scanned = []
    scan = ScanRNN(copy.deepcopy(ref.rnn), recurrence=lambda *a: scanned.append(1) or eager_recurrence(*a))
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    (out, h), (r_out, r_h) = scan(packed), ref.rnn(packed)
    assert scanned == [1, 1]  # each direction scanned once
    assert out.data.shape == r_out.data.shape == (sum(LENGTHS), 10)
    assert torch.equal(out.batch_sizes, r_out.batch_sizes) and torch.equal(out.unsorted_indices, r_out.unsorted_indices)
    assert (out.data - r_out.data).abs().max() < 1e-5 and (h - r_h).abs().max() < 1e-5


class Unpacked(nn.Module):
    """Packs, runs its LSTM, unpacks without total_length and with another padding value."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, lengths):
        out, _ = self.lstm(pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False))
        return pad_packed_sequence(out, batch_first=True, padding_value=-1.0)


def test_pad_packed_sequence_keeps_the_padded_length_and_pads_with_the_padding_value():
    """Without total_length nn pads to the batch's longest sequence, a length the data decides; the scan's packed
    batch keeps the padded batch's T steps (a fixed shape), padding_value past each length, and the lengths."""
    ref, x, _, _ = case_inputs("LSTM, 1 layer, batch_first")
    ref, lengths = Unpacked(ref.rnn), torch.tensor([5, 2, 6, 3])  # the longest is 6 of T = 7
    net = copy.deepcopy(ref)
    use_scan_rnn(net, verbose=False, recurrence=eager_recurrence)
    with torch.no_grad():
        (out, got_lengths), (r_out, r_lengths) = net(x, lengths), ref(x, lengths)
    assert r_out.shape == (4, 6, 5) and out.shape == (4, STEPS, 5)
    assert (out[:, :6] - r_out).abs().max() < 1e-5 and (out[:, 6] == -1).all()
    assert got_lengths.tolist() == r_lengths.tolist() == [5, 2, 6, 3]


def test_a_packed_batch_for_a_module_the_scan_cannot_run_is_one_line():
    """An LSTM with proj_size stays nn's on XLA, which would read the fixed-shape packed batch as every sequence
    full length: refused in one line that says what runs, at the first forward, though no scan is in the net."""
    from xla_train.errors import ConfigError

    net = PackedNet(nn.LSTM(3, 5, proj_size=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert use_scan_rnn(net, verbose=False, recurrence=eager_recurrence) == []
    with pytest.raises(ConfigError) as e:
        net(torch.randn(STEPS, 4, 3), torch.tensor(LENGTHS))
    message = str(e.value)
    assert "\n" not in message and "plain nn.LSTM, nn.GRU or nn.RNN" in message and "padded ids" in message, message


def _state_gradients_on_jax(cases: dict) -> dict[str, list[torch.Tensor]]:
    """The scans on JAX, every case in one jitted program of the initial states' gradients, in this process."""
    import jax
    import numpy as np
    from torchax.interop import jax_view, torch_view

    from xla_train.runtime.jax.compat import environment
    from xla_train.runtime.jax.recurrence import jax_recurrence

    def arrays(tensors):
        return [jax.numpy.asarray(t.detach().numpy()) for t in tensors]

    scans = {name: ScanRNN(copy.deepcopy(net), jax_recurrence(1)) for name, (net, *_) in cases.items()}
    fixed = {name: (arrays(scans[name].parameters()), arrays([x, *w])) for name, (_, x, _, w) in cases.items()}

    def loss(states):
        total = 0.0
        with environment():
            for name, scan in scans.items():
                params, (x, *weights) = fixed[name]
                named = dict(zip([n for n, _ in scan.named_parameters()], torch_view(params)))
                hx = rnn_states.given(list(torch_view(states[name])))
                out, final = torch.func.functional_call(scan, named, (torch_view(x), hx))
                finals = final if isinstance(final, tuple) else (final,)
                total = total + sum((t * w).sum() for t, w in zip((out, *finals), torch_view(weights)))
        return jax_view(total)

    grads = jax.jit(jax.grad(loss))({name: arrays(states) for name, (_, _, states, _) in cases.items()})
    return {name: [torch.from_numpy(np.array(g)) for g in found] for name, found in grads.items()}


STATE_GRADIENTS_ON = {  # runtime -> {case: [largest difference from nn, nn's smallest slice] per state}
    "torch_xla": lambda request: request.getfixturevalue("on_xla")["initial state"],  # scan_rnn_on_xla.py's
    "jax": lambda request: rnn_states.differences(
        rnn_states.state_cases(), _state_gradients_on_jax(rnn_states.state_cases())
    ),
}


def test_gradients_reach_an_lstms_and_a_grus_initial_state_as_on_the_cpu(runtime, request):
    """A decoder that starts from its encoder's final state, or a net that learns its initial state, trains through
    h0 (and an LSTM's c0) only if the scan's own backward hands their gradients on: with the scan on the runtime,
    they are nn's on the CPU, for each layer and direction of a two-layer bidirectional LSTM and GRU."""
    found = STATE_GRADIENTS_ON[runtime](request)
    assert sorted(found) == sorted(rnn_states.MODES), found
    for name, states in found.items():
        assert len(states) == (2 if rnn_states.MODES[name] == "LSTM" else 1), (name, states)
        for i, (difference, least) in enumerate(states):
            assert least > 1e-2, (name, i, least)  # through nn the loss reaches every layer's and direction's slice
            assert difference < 1e-5, (name, f"d state {i}", difference)
