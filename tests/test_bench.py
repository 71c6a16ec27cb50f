"""`python -m xla_train bench`: the sweep's files and its presets, the overhead comparison's equal work, CPU inference,
the tokeniser study, and bad arguments.

Timings are never asserted (this machine is shared); what is checked is that
every number is recorded, well formed and consistent with the others. Sweep
and overhead run a tiny LSTM recipe (synthetic data of its shapes), which
compiles in seconds on XLA:CPU.
"""

import csv
import re
import struct
import zlib

import numpy as np
import pytest
import torch

from helpers import cli_env, path_with_tests, require, run_cli, runtime_key
from helpers.processes import SUITE_XLA_FLAGS
from xla_train.cli.main import main
from xla_train.serve.predictor import load_for_inference

TINY_RECIPE = """\
model:
  net:
    class_path: xla_train.models.SentimentLSTM
    init_args: {vocab_size: 64, embed_dim: 8, hidden_size: 8}
  lr: 0.001
data:
  class_path: xla_train.data.imdb.IMDBDataModule
  init_args: {maxlen: 16, vocab_size: 64, batch_size: 8, data_dir: DATA_DIR}
trainer: {accelerator: xla, devices: 1}
seed_everything: 0
"""
PROVENANCE = ("hardware", "versions", "date", "command")


@pytest.fixture(scope="module")
def tiny_recipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipes")
    path = folder / "tiny_lstm.yaml"
    path.write_text(TINY_RECIPE.replace("DATA_DIR", str(folder / "no_imdb_here")))
    return path


def read_table(path):
    """(provenance from the leading # lines, rows)."""
    lines = path.read_text().splitlines()
    prov = dict(ln[2:].split(": ", 1) for ln in lines if ln.startswith("# "))
    rows = list(csv.DictReader(ln for ln in lines if not ln.startswith("#")))
    return prov, rows


def png_text(path) -> dict:
    """The PNG's tEXt chunks, after checking its signature and every chunk's CRC."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, text, kinds = 8, {}, []
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0] == zlib.crc32(kind + body)
        if kind == b"tEXt":
            key, value = body.split(b"\0", 1)
            text[key.decode()] = value.decode("latin-1")
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    return text


def test_sweep_writes_a_table_and_charts_with_their_evidence(tiny_recipe, tmp_path):
    # eager CPU cells: test_sweep_compares_precision_compile_and_channels_last_on_cpu (default-suite time)
    settings = "accelerators=xla batch_sizes=8,16 steps=2 warmup=2 on_device=true".split()
    settings += ["steps_per_execution=2", "execution_loop=while"]
    proc = run_cli("bench", f"recipe={tiny_recipe}", *settings, cwd=tmp_path, timeout=400)
    run = tmp_path / "runs" / "bench" / "version_0"
    assert f"results: {run.relative_to(tmp_path)}" in proc.stdout
    prov, rows = read_table(run / "bench.csv")
    assert set(prov) == set(PROVENANCE)
    assert re.search(r"torch 2\.\d+\.\d+, torch_xla 2\.\d+\.\d+, lightning 2\.\d+\.\d+", prov["versions"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", prov["date"])
    assert "core(s)" in prov["hardware"] and "XLA:CPU" in prov["hardware"]
    # the shell's settings that change the figures come first in the command that reproduces them
    assert prov["command"].startswith(f"XLA_FLAGS={SUITE_XLA_FLAGS} PJRT_DEVICE=CPU CPU_NUM_DEVICES=1 "), prov
    assert prov["command"].endswith(f" python -m xla_train bench recipe={tiny_recipe} {' '.join(settings)}"), prov
    assert [(r["accelerator"], int(r["batch"])) for r in rows] == [("xla", 8), ("xla", 16)]
    for r in rows:
        assert not r["error"], r["error"]
        assert r["data"] == "synthetic" and r["steps"] == "2" and r["warmup"] == "2"
        assert (r["on_device"], r["steps_per_execution"], r["execution_loop"]) == ("True", "2", "while")
        assert r["matmul_precision"] == "default"  # XLA's float32 matmul precision in effect (a TPU: one bf16 pass)
        assert r["timed_compiles"] == "0", r  # warm-up compiled everything the timed executions ran
        # the real IMDB is not here, so the epoch is projected from its published training-set size,
        # less the 2,500 reviews val_fraction=0.1 holds out for validation
        assert (r["train_size"], r["train_size_source"]) == ("22500", "published size")
        assert int(r["steps_per_epoch"]) == 22500 // int(r["global_batch"])
        step_s, epoch_s = float(r["step_ms"]) / 1e3, float(r["epoch_s"])
        assert step_s > 0 and epoch_s == pytest.approx(int(r["steps_per_epoch"]) * step_s, rel=1e-4)
        assert float(r["samples_per_s"]) == pytest.approx(int(r["global_batch"]) / step_s, rel=1e-4)
        assert float(r["first_step_s"]) > 0 and float(r["host_peak_mb"]) > 50
        assert int(r["compiles"]) > 0 and float(r["compile_s"]) > 0, r
        assert r["device"] == "XLA:CPU"
        # the host's and the device's share of a step, from split steps after the timed ones
        host, device = float(r["host_ms_per_step"]), float(r["device_ms_per_step"])
        assert host > 0 and device > 0 and int(r["split_steps"]) == 2, r
        assert r["host_bound"] == str(host >= device)

    md = (run / "bench.md").read_text()
    for key in PROVENANCE:
        assert f"- {key}: " in md
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len(table) == 2 + len(rows) and all(ln.count("|") == table[0].count("|") for ln in table)
    assert "synthetic" in md and "not a TPU figure" in md
    assert all(ln.count("| n/a (XLA:CPU) |") == 1 for ln in table[2:])  # no peak memory on XLA:CPU: said, not blank
    for name in ("epoch_time_by_accelerator.png", "epoch_time_by_batch.png"):
        assert f"]({name})" in md
        meta = png_text(run / name)
        assert prov["versions"] in meta["Description"] and prov["date"] in meta["Description"]
    for cell in (
        "xla-d1-b8-k2-while-on_devicetrue",
        "xla-d1-b16-k2-while-on_devicetrue",
    ):  # each in its own process and log
        assert (run / "cells" / f"{cell}.log").is_file()


def test_overhead_runs_quickstart_with_xla_trains_layers_on_both_sides(runtime, tmp_path):
    """bench overhead end to end on the quickstart CNN, shrunk to one timed step of batch 8, on either runtime: both
    cells run (a cell had asked for a training-set size only the sweep gives it), and the plain loop swaps in the
    layers xla_train's side runs on XLA:CPU (hashed dropout, max pooling as a reduction), so the two first-step losses
    are one computation's; a plain loop with the runtime's own dropout drew other masks, another loss, and the
    command fails."""
    settings = ["recipe=quickstart", "steps=1", "warmup=1", "batch_size=8", runtime_key(runtime)]
    proc = run_cli("bench", "overhead", *settings, cwd=tmp_path)
    printed = re.search(r"xla_train / plain steady step time: ([\d.]+)", proc.stdout)
    assert printed, proc.stdout
    assert re.search(r"first-step losses: plain ([\d.]+), xla_train \1: equal, the same work", proc.stdout), proc.stdout
    prov, rows = read_table(tmp_path / "runs" / "bench" / "version_0" / "overhead.csv")
    assert set(prov) == set(PROVENANCE) and prov["command"].endswith("bench overhead " + " ".join(settings))
    sides = {r["side"]: r for r in rows}
    plain, ours = sides["plain"], sides["xla_train"]
    assert {r["runtime"] for r in rows} == {runtime} and {r["global_batch"] for r in rows} == {"8"}
    ratio = float(ours["step_ms"]) / float(plain["step_ms"])
    assert float(ours["ratio"]) == pytest.approx(ratio, rel=1e-4)
    assert float(printed[1]) == pytest.approx(ratio, abs=1e-3)  # the line's ratio is the table's, to 3 places
    assert float(plain["first_loss"]) == pytest.approx(float(ours["first_loss"]), rel=1e-5)
    assert 1.5 < float(plain["first_loss"]) < 3.5  # ten classes: a cross-entropy near ln 10, not a placeholder


@pytest.mark.slow  # default-suite time; a benchmark's own check, not a product path
def test_overhead_runs_the_same_work_on_both_sides(tiny_recipe, tmp_path):
    proc = run_cli("bench", "overhead", f"recipe={tiny_recipe}", "steps=2", "warmup=1", cwd=tmp_path, timeout=300)
    ratio = re.search(r"xla_train / plain steady step time: ([\d.]+)", proc.stdout)
    assert ratio, proc.stdout
    prov, rows = read_table(tmp_path / "runs" / "bench" / "version_0" / "overhead.csv")
    assert set(prov) == set(PROVENANCE)
    sides = {r["side"]: r for r in rows}
    assert set(sides) == {"plain", "xla_train"}
    plain, ours = sides["plain"], sides["xla_train"]
    # same seed, same initial weights, same first batch: the same loss, up to the graphs' rounding
    assert float(plain["first_loss"]) == pytest.approx(float(ours["first_loss"]), rel=1e-5)
    assert 0.3 < float(plain["first_loss"]) < 2.0  # a binary cross-entropy near ln 2, not a placeholder
    assert float(ours["ratio"]) == pytest.approx(float(ours["step_ms"]) / float(plain["step_ms"]), rel=1e-4)
    assert float(ratio.group(1)) == pytest.approx(float(ours["ratio"]), abs=1e-3)
    host_ratio = re.search(
        r"xla_train / plain host ms per step: ([\d.]+) \(goal <= 1\.10: (met|NOT met)\)", proc.stdout
    )
    assert host_ratio, proc.stdout
    assert float(ours["host_ratio"]) == pytest.approx(
        float(ours["host_ms_per_step"]) / float(plain["host_ms_per_step"]), rel=1e-4
    )
    assert float(host_ratio.group(1)) == pytest.approx(float(ours["host_ratio"]), abs=1e-3)
    assert all(
        float(side["host_ms_per_step"]) > 0
        and float(side["device_ms_per_step"]) > 0
        and side["steps_per_execution"] == "1"
        for side in rows
    )
    cpu_ratio = re.search(
        r"xla_train / plain host CPU ms per step: ([\d.]+) \(goal <= 1\.10: (met|NOT met)\)", proc.stdout
    )
    assert cpu_ratio, proc.stdout
    assert float(cpu_ratio.group(1)) == pytest.approx(
        float(ours["host_cpu_ms_per_step"]) / float(plain["host_cpu_ms_per_step"]), abs=1e-3
    )
    # the thread's own work fits inside its wall time (syncs out of both: an identity, not a load-dependent bound),
    # and a trace takes real work
    assert all(0 < float(side["host_cpu_ms_per_step"]) <= float(side["host_ms_per_step"]) + 1e-3 for side in rows)
    assert int(plain["compiles"]) > 0 and int(ours["compiles"]) > 0


def check_predict_rows(rows, batch):
    for r in rows:
        if r["note"].startswith("skipped"):
            continue
        assert 0 < float(r["latency_ms_median"]) <= float(r["latency_ms_p95"])
        assert float(r["samples_per_s"]) == pytest.approx(batch / (float(r["batch_ms_median"]) / 1e3), rel=1e-4)
        assert float(r["speedup_batch1"]) == pytest.approx(
            float(rows[0]["latency_ms_median"]) / float(r["latency_ms_median"]), rel=1e-3
        )


def test_predict_bench_compares_serving_forms_side_by_side(
    cpu_run, cifar_root, tmp_path, capsys, monkeypatch, relaxed_cifar_checks
):
    """eager, ONNX Runtime on the export and int8, each against eager's probabilities and on the test split."""
    monkeypatch.chdir(tmp_path)
    ckpt = cpu_run / "checkpoints" / "last.ckpt"
    settings = "repeats=10 batch_size=32 forms=onnx,int8".split()
    assert main(["bench", "predict", f"ckpt={ckpt}", *settings, f"runs_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    prov, rows = read_table(tmp_path / "bench" / "version_0" / "predict.csv")
    assert set(prov) == set(PROVENANCE) and "thread(s)" in prov["hardware"]
    assert [r["what"] for r in rows] == ["eager", "onnxruntime", "int8 dynamic", "eager end to end"]
    assert [r["fp32"] for r in rows] == ["True", "True", "False", "True"]
    check_predict_rows(rows, 32)
    eager, onnx, int8, _ = rows
    assert float(eager["max_abs_diff"]) == 0 and float(onnx["max_abs_diff"]) < 1e-4, rows
    assert 0 < float(int8["max_abs_diff"]) < 0.1  # int8 changes the answers a little, and says how much
    # the checkpoint's own test split (80 fixture images): eager's accuracy, and each form's change from it
    from torchvision.datasets import CIFAR10

    test = CIFAR10(str(cifar_root), train=False, download=False)  # the run's test split, read apart from the bench
    probs = load_for_inference(ckpt).probabilities(test.data).numpy()
    assert float(eager["test_acc"]) == pytest.approx(float((probs.argmax(1) == np.array(test.targets)).mean()))
    for r in (onnx, int8):
        assert float(r["acc_change"]) == pytest.approx(float(r["test_acc"]) - float(eager["test_acc"]), abs=1e-9)
    assert float(onnx["acc_change"]) == 0
    assert "batch 1 median ms" in out and "batch 32 samples/s" in out and "acc change" in out


@pytest.mark.slow
def test_predict_bench_with_torch_compile(cpu_run, tmp_path, relaxed_cifar_checks):
    """torch.compile's row: compiled in the warm-up (a minute or more on a busy 2-core machine), then timed."""
    ckpt = cpu_run / "checkpoints" / "last.ckpt"
    settings = "repeats=5 batch_size=16 forms=compile score=false".split()
    assert main(["bench", "predict", f"ckpt={ckpt}", *settings, f"runs_dir={tmp_path}"]) == 0
    _, rows = read_table(tmp_path / "bench" / "version_0" / "predict.csv")
    assert [r["what"] for r in rows] == ["eager", "torch.compile", "eager end to end"]
    check_predict_rows(rows, 16)
    assert float(rows[1]["max_abs_diff"]) < 1e-4 and rows[1]["test_acc"] == ""


def test_int8_lstm_keeps_the_masked_recurrence():
    """int8 dynamic quantisation of the text net: its LSTM and dense layer in int8, padding still skipped."""
    from torch.ao.nn.quantized.dynamic import LSTM as DynamicLSTM, Linear as DynamicLinear

    from xla_train.bench.predict import int8_dynamic
    from xla_train.models.lstm import SentimentLSTM

    torch.manual_seed(0)
    net = SentimentLSTM(vocab_size=50, embed_dim=16, hidden_size=8).eval()
    q = int8_dynamic(net)
    assert isinstance(q.lstm.int8, DynamicLSTM) and isinstance(q.head, DynamicLinear)
    ids = torch.randint(2, 50, (6, 12))
    padded = torch.cat([torch.zeros(6, 20, dtype=torch.long), ids], 1)
    with torch.no_grad():
        a, b, ref = q(ids), q(padded), net(ids)
    torch.testing.assert_close(a, b)  # front padding changes nothing
    assert 0 < (a - ref).abs().max() < 0.05  # int8 is close, not equal
    assert isinstance(net.lstm, torch.nn.LSTM) and not hasattr(net.lstm, "int8")  # the original is untouched


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["recipe=quickstart", "accelerators=cpu,fpga"],
            "accelerators: expected one of 'cpu', 'gpu', 'tpu', 'xla', got 'fpga'",
        ),
        (["recipe=quickstart", "batch_sizes=8,12"], "batch_size=12 is not a positive multiple of 8"),
        (["recipe=quickstart", "steps=0"], "steps: not of type PositiveInt: 0 does not conform"),
        (["recipe=quickstart", "steps=many"], "steps: not of type PositiveInt"),
        (["recipe=quickstart", "stepz=3"], "unknown key 'stepz'; did you mean steps?"),
        (
            ["recipe=quickstart", "devicez=8"],
            "unknown key 'devicez'; did you mean devices or on_device?;",
        ),  # each candidate once
        (["recipe=quickstart", "on_device=maybe"], "on_device: expected"),
        (["recipe=quickstart", "epochs=3"], "builds the trainer itself"),
        (["recipe=quickstart", "batch_size=64"], "sets the batch itself: use batch_sizes="),
        (["recipe=nope", "accelerators=cpu"], "unknown recipe 'nope'"),
        (["accelerators=cpu"], "bench sweep needs recipe="),
        (["curves", "recipe=quickstart", "data=real"], "bench curves: unknown key 'data'"),
        (["overhead", "recipe=quickstart", "accelerator=cpu"], "accelerator: expected one of 'xla', 'tpu', got 'cpu'"),
        (["overhead", "recipe=quickstart", "runtime=tf"], "runtime: expected one of 'auto', 'torch_xla', 'jax'"),
        (["predict", "repeats=3"], "bench predict needs ckpt="),
        (["text", "reviewz=10"], "did you mean reviews?"),
        (["replicas", "devices=1,none"], "devices:"),
        (
            ["replicas", "processes=2", "runtimes=torch_xla"],
            "processes=2 runs one program over 2 processes of this machine's CPU, which runtime=torch_xla cannot "
            "on accelerator=xla; use runtimes=jax",
        ),
        (["replicas", "processes=3", "runtimes=jax"], "processes=3 does not divide devices=8: every process brings"),
        (["replicas", "processes=2", "runtimes=jax", "devices=auto"], "processes=2 does not divide devices=auto"),
        (["serve", "ckpt=x.ckpt", "seconds=2.5"], "seconds: not of type PositiveInt"),  # wrk counts whole seconds
        (
            ["recipe=quickstart", "overhead"],
            "bench's subcommand (sweep, replicas, lstm, pipeline, overhead, curves, predict, text, serve) must come first",
        ),
    ],
)
def test_bad_bench_arguments_are_one_line_errors(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xla_train: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "runs").exists()


def test_bench_serve_without_wrk_says_how_to_get_it_in_one_line(tmp_path, capsys, monkeypatch):
    """wrk is the load; without it the bench stops before it reads the checkpoint or starts a server."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no wrk in it
    assert main(["bench", "serve", f"ckpt={tmp_path / 'missing.ckpt'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wrk, which is not on PATH: apt-get install wrk" in err, err
    assert not (tmp_path / "runs").exists()


IDLE_MS = 20.0  # what each step's forward waits idle on the host (probes.IdleLSTM)


def test_auto_settings_mean_what_fit_would_choose_and_the_csv_says_what_they_became(tiny_recipe, tmp_path):
    """bench's default steps_per_execution=auto and execution_loop=auto are decided against the recipe's own run and
    net, as fit decides them, not against the few steps a cell times: the tiny recipe's LSTM has no convolution, so
    on XLA:CPU its steps run as a While loop of K=32. Unrolled, K is decided by the run's length: capped at 100 steps
    it runs one step a program, traced once, so the net's forward, which waits idle 20 ms on the host here
    (probes.IdleLSTM), runs at the trace and in no timed step. steps_per_execution=1 is Lightning's own step, traced anew each step: the host's wall time holds
    the wait and its CPU time cannot, however loaded the machine is. The CSV keeps each setting next to what it
    became, and the host's CPU time per step."""
    idle_recipe = tmp_path / "idle_lstm.yaml"
    idle = tiny_recipe.read_text().replace("devices: 1}", "devices: 1, max_steps: 100}")
    idle = idle.replace("xla_train.models.SentimentLSTM", "probes.IdleLSTM")
    idle_recipe.write_text(idle.replace("hidden_size: 8}", f"hidden_size: 8, idle_ms: {IDLE_MS}}}"))
    settings = "accelerators=xla batch_sizes=8 steps=8 warmup=8".split()
    env = cli_env(1, PYTHONPATH=path_with_tests())  # each cell too
    run_cli("bench", f"recipe={tiny_recipe}", *settings, cwd=tmp_path, timeout=400, env=env)
    run_cli(
        "bench",
        f"recipe={idle_recipe}",
        *settings,
        "steps_per_execution=auto,1",
        "execution_loop=unroll",
        "scan_chunk=3",  # the scan's time steps per iteration, as a user sets them for a TPU
        cwd=tmp_path,
        timeout=400,
        env=env,
    )
    (long,) = read_table(tmp_path / "runs" / "bench" / "version_0" / "bench.csv")[1]
    auto, one = read_table(tmp_path / "runs" / "bench" / "version_1" / "bench.csv")[1]
    assert not long["error"] and (long["steps_per_execution_used"], long["execution_loop_used"]) == ("32", "while")
    # the chunk each cell's scan ran at, read from the net it ran: the platform's default, then the setting's
    assert (long["scan_chunk"], auto["scan_chunk"], one["scan_chunk"]) == ("1", "3", "3")
    for r, loop in ((auto, "unroll"), (one, "auto")):  # a K of 1 set runs no loop: the grid shows auto
        assert not r["error"] and r["timed_compiles"] == "0", r
        # unrolled, auto's K for a run of 100 steps is 1 (a While loop's would be 32)
        assert (r["execution_loop"], r["on_device"], r["steps_per_execution_used"]) == (loop, "True", "1"), r
        # A thread's CPU time is at most its wall time, syncs taken out of both: no bound that load could move.
        assert 0 < float(r["host_cpu_ms_per_step"]) <= float(r["host_ms_per_step"]) + 1e-3, r
    assert (auto["steps_per_execution"], auto["traced_once"], one["traced_once"]) == ("auto", "True", "False")
    assert float(auto["host_ms_per_step"]) < IDLE_MS, auto  # no step traced the net again
    host, host_cpu = float(one["host_ms_per_step"]), float(one["host_cpu_ms_per_step"])
    assert host >= IDLE_MS and host_cpu <= host - 0.9 * IDLE_MS, one  # the idle wait: wall time, not CPU time
    assert "| 32 (auto) | while (auto) |" in (tmp_path / "runs" / "bench" / "version_0" / "bench.md").read_text()
    md = (tmp_path / "runs" / "bench" / "version_1" / "bench.md").read_text()
    assert "steps/execution 1 (auto) on XLA: each step runs the program its first step traced" in md


def test_replicas_compare_one_and_several_xla_devices(tiny_recipe, tmp_path):
    settings = "devices=1,2 batch_sizes=8 steps=2 warmup=2".split()
    run_cli("bench", "replicas", f"recipe={tiny_recipe}", *settings, cwd=tmp_path, timeout=400)
    _, rows = read_table(tmp_path / "runs" / "bench" / "version_0" / "bench.csv")
    assert [(r["accelerator"], r["devices"], r["global_batch"], r["device"]) for r in rows] == [
        ("xla", "1", "8", "XLA:CPU"),
        ("xla", "2", "16", "XLA:CPU x2"),
    ]  # each cell had the devices it asked for
    assert all(not r["error"] and int(r["compiles"]) > 0 and r["timed_compiles"] == "0" for r in rows), rows


def test_replicas_compare_one_process_against_two_processes_of_jax(tiny_recipe, tmp_path):
    """bench replicas processes=2: one process of 2 XLA:CPU devices against 2 processes of 1 (runtime=jax, the bench
    starting both with JAX's three variables, as a launch without a cluster does), the same global batch side by side,
    and what crossing processes cost a step named."""
    require("torchax")
    settings = "runtimes=jax devices=2 processes=2 batch_sizes=8 steps=2 warmup=2".split()
    run_cli("bench", "replicas", f"recipe={tiny_recipe}", *settings, cwd=tmp_path, timeout=400)
    run = tmp_path / "runs" / "bench" / "version_0"
    _, rows = read_table(run / "bench.csv")
    assert [(r["runtime"], r["devices"], r["processes"], r["global_batch"]) for r in rows] == [
        ("jax", "2", "1", "16"),
        ("jax", "2", "2", "16"),
    ], rows
    assert all(not r["error"] and float(r["step_ms"]) > 0 for r in rows), rows
    assert rows[1]["device"].endswith(" x2 (2 processes of 1)"), rows[1]["device"]  # each process had its share
    assert (run / "cells" / "xla-jax-d2-p2-b8-kauto-process1.json").is_file()  # process 1 ran the cell too
    md = (run / "bench.md").read_text()
    assert re.search(r"2 processes of 1 device\(s\) against 1 of 2 \(global batch 16\): [+-]\d+\.\d ms a step", md), md
    assert "gloo over this machine's loopback TCP" in md


@pytest.mark.slow  # default-suite time; K itself: test_steps_per_execution.py
def test_sweep_compares_steps_per_execution(tiny_recipe, tmp_path):
    """K steps as one program: each cell times whole executions and reports per step (bench/timing.py)."""
    settings = "accelerators=cpu,xla batch_sizes=8 steps_per_execution=1,4 steps=4 warmup=4".split()
    run_cli("bench", f"recipe={tiny_recipe}", *settings, cwd=tmp_path, timeout=400)
    run = tmp_path / "runs" / "bench" / "version_0"
    _, rows = read_table(run / "bench.csv")
    # eager CPU runs one step at a time, so it gets one cell
    assert [(r["accelerator"], r["steps_per_execution"]) for r in rows] == [("cpu", "1"), ("xla", "1"), ("xla", "4")], (
        rows
    )
    one, four = rows[1], rows[2]
    assert not one["error"] and not four["error"], rows
    assert (one["split_steps"], four["split_steps"]) == ("4", "4")  # 4 single steps; 1 execution of 4
    assert four["timed_compiles"] == "0" and int(four["compiles"]) >= 1
    for r in (one, four):
        assert float(r["host_ms_per_step"]) > 0 and float(r["device_ms_per_step"]) > 0 and float(r["step_ms"]) > 0
        assert float(r["samples_per_s"]) == pytest.approx(8 / (float(r["step_ms"]) / 1e3), rel=1e-4)
    assert "| steps/execution |" in (run / "bench.md").read_text()
    assert sorted(p.name for p in (run / "cells").glob("*.json")) == [
        "cpu-d1-b8.json",
        "xla-d1-b8-k4.json",
        "xla-d1-b8.json",
    ]


def test_lstm_and_pipeline_presets_vary_their_own_key(tiny_recipe, tmp_path):
    settings = "maxlens=8,16 accelerators=cpu batch_sizes=8 steps=2 warmup=1".split()
    run_cli("bench", "lstm", f"recipe={tiny_recipe}", *settings, cwd=tmp_path, timeout=300)
    _, rows = read_table(tmp_path / "runs" / "bench" / "version_0" / "bench.csv")
    assert [r["maxlen"] for r in rows] == ["8", "16"] and all(not r["error"] for r in rows), rows
    settings = "progress_every=0,1 accelerators=cpu batch_sizes=8 steps=2 warmup=1 rounds=2".split()
    proc = run_cli("bench", "pipeline", f"recipe={tiny_recipe}", *settings, cwd=tmp_path, timeout=300)
    _, rows = read_table(tmp_path / "runs" / "bench" / "version_1" / "bench.csv")
    assert [(r["progress_every"], r["rounds"]) for r in rows] == [("0", "2"), ("1", "2")], rows
    assert "x 2 rounds in alternating order" in proc.stdout
    cells = sorted(p.name for p in (tmp_path / "runs" / "bench" / "version_1" / "cells").glob("*.json"))
    assert cells == [
        "cpu-d1-b8-p1-round0.json",
        "cpu-d1-b8-p1-round1.json",
        "cpu-d1-b8-round0.json",
        "cpu-d1-b8-round1.json",
    ]


def test_text_times_the_tokeniser_on_synthetic_reviews(tmp_path, capsys, monkeypatch):
    """Each row's wall figure is the median of its repeats and its CPU figure the CPU seconds per repeat: pinned
    here with a clock that gives known answers, around the real tokenizer work."""
    from xla_train.bench import text as bench_text

    walls = iter([[0.5, 0.1, 0.2], [9.0, 1.0, 2.0], [0.2, 0.01, 0.03]])  # medians, not means: 0.2, 2, 0.03

    def time_calls(fns, repeats, warmup):  # runs the work as the real one does, and reports known times
        for _ in range(repeats):
            fns[0]()
        return [next(walls)]

    monkeypatch.setattr(bench_text, "time_calls", time_calls)
    cpu = iter([0.0, 0.6, 10.0, 16.0, 20.0, 20.3])
    monkeypatch.setattr(bench_text, "cpu_seconds", lambda: next(cpu))
    assert (
        main(["bench", "text", "reviews=400", "maxlen=32", "vocab_size=100", "repeats=3", f"runs_dir={tmp_path}"]) == 0
    )
    prov, rows = read_table(tmp_path / "bench" / "version_0" / "text.csv")
    assert set(prov) == set(PROVENANCE)
    assert [r["what"] for r in rows] == [
        "vocabulary from 200 reviews",
        "encode 400 reviews (and save the arrays)",
        "reload the cached arrays",
    ]
    assert [float(r["wall_s"]) for r in rows] == pytest.approx([0.2, 2.0, 0.03])
    assert [float(r["cpu_s"]) for r in rows] == pytest.approx([0.2, 2.0, 0.1])
    assert "encode 400 reviews" in capsys.readouterr().out


def test_synthetic_reviews_have_aclimdb_lengths():
    from xla_train.bench.data import synthetic_reviews

    words = [len(r.split()) for r in synthetic_reviews(2000)]
    assert min(words) >= 10 and 150 < sorted(words)[1000] < 200  # median ~174, as aclImdb


def test_curves_trains_each_batch_size_and_plots_validation_accuracy(tmp_path):
    proc = run_cli(
        "bench",
        "curves",
        "recipe=quickstart",
        "accelerator=cpu",
        "batch_sizes=64,128",
        "epochs=2",
        cwd=tmp_path,
        timeout=600,
    )
    run = tmp_path / "runs" / "bench" / "version_0"
    prov, rows = read_table(run / "curves.csv")
    assert set(prov) == set(PROVENANCE) and "fit on accelerator cpu, 1 device(s)" in prov["hardware"]
    assert sorted((int(r["batch"]), int(r["epoch"])) for r in rows) == [(64, 0), (64, 1), (128, 0), (128, 1)]
    assert all(0 <= float(r["val_acc"]) <= 1 for r in rows)
    fit = next((run / "fits" / "b64").glob("*/version_0/metrics.csv"))  # the numbers are the fit's own
    assert any(ln.split(",")[0] == "1" for ln in fit.read_text().splitlines())
    assert "validation accuracy by epoch" in proc.stdout
    png_text(run / "val_acc_by_epoch.png")


def test_sweep_compares_precision_compile_and_channels_last_on_cpu(tmp_path):
    """The fast path's knobs as lists (runtime/eager/fast_path.py): one cell each, recording what it ran with. A conv net:
    channels_last is a convolution's memory format, and a CPU without native bf16 (no avx512_bf16) still runs a
    convolution under bf16 autocast, where oneDNN has no bf16 LSTM for it."""
    settings = "accelerators=cpu batch_sizes=8 precision=32,bf16-mixed steps=2 warmup=1".split()
    settings += ["compile=false", "channels_last=true"]
    run_cli("bench", "recipe=quickstart", *settings, cwd=tmp_path, timeout=300)
    run = tmp_path / "runs" / "bench" / "version_0"
    _, rows = read_table(run / "bench.csv")
    assert [(r["precision"], r["compile"], r["channels_last"]) for r in rows] == [
        ("32", "False", "True"),
        ("bf16-mixed", "False", "True"),
    ], rows
    assert all(not r["error"] and float(r["step_ms"]) > 0 and r["compiles"] == "" for r in rows), rows
    for r in rows:  # eager CPU: the host does everything, so there is nothing to split
        assert r["compile_s"] == "" and r["device"].startswith("CPU, eager") and r["matmul_precision"] == "", r
        assert (r["host_ms_per_step"], r["device_ms_per_step"], r["split_steps"]) == ("", "", "0"), r
    md = (run / "bench.md").read_text()
    assert "| precision |" in md and "| channels_last |" not in md  # only the keys that vary get a column
    assert sorted(p.stem for p in (run / "cells").glob("*.json")) == [
        "cpu-d1-b8-32-nocompile-cl",
        "cpu-d1-b8-bf16-mixed-nocompile-cl",
    ]


def test_the_device_memory_cell_says_why_it_is_empty():
    from xla_train.bench.sweep_table import device_mb

    assert device_mb({"accelerator": "tpu", "device": "TPU v5 lite x8", "devices": 8}) == "n/a (SPMD)"
    assert device_mb({"accelerator": "xla", "device": "XLA:CPU (...)", "devices": 1}) == "n/a (XLA:CPU)"
    assert device_mb({"accelerator": "tpu", "device": "TPU v5 lite", "devices": 1, "device_peak_mb": 812.4}) == "812"
    assert device_mb({"accelerator": "xla", "device": "", "error": "failed"}) == "-"


def test_rounds_pool_every_split_step_for_the_host_and_its_cpu_time():
    """bench overhead's and the sweep's host figures are medians over the split steps of all rounds, not one
    round's median (a slow spell in one round must not decide the ratio)."""
    from xla_train.bench.sweep import split_medians

    # each figure's pooled median differs from the mean of the two rounds' medians (12, 82.5 and 6)
    rounds = [
        {"host_times_ms": [10, 11, 30], "device_times_ms": [80, 81, 90], "host_cpu_times_ms": [1, 2, 3]},
        {"host_times_ms": [12, 13, 14], "device_times_ms": [83, 84, 85], "host_cpu_times_ms": [2.5, 10, 11]},
    ]
    assert split_medians(rounds) == {
        "host_ms_per_step": 12.5,
        "device_ms_per_step": 83.5,
        "host_bound": False,
        "host_cpu_ms_per_step": 2.75,
    }


def test_the_presets_are_the_sweep_with_their_own_keys(monkeypatch):
    """bench replicas, lstm and pipeline hand every argument they share with the sweep to it, by name."""
    import functools

    from xla_train.bench import presets

    calls = []
    monkeypatch.setattr(presets, "sweep", functools.wraps(presets.sweep)(lambda **kw: calls.append(kw) or (0, None)))
    presets.lstm(maxlens=[8, 16], batch_sizes=[4], command="c")
    presets.replicas(devices=[1, 2], steps=7)
    presets.pipeline(progress_every=[0, 1], rounds=3)
    lstm, replicas, pipeline = calls
    assert lstm["grid"] == {"maxlen": [8, 16]} and "maxlens" not in lstm
    assert (lstm["recipe"], lstm["batch_sizes"], lstm["accelerators"], lstm["command"]) == ("imdb", [4], ["xla"], "c")
    assert (replicas["accelerators"], replicas["devices"], replicas["steps"]) == (["xla"], [1, 2], 7)
    assert (replicas["batch_sizes"], replicas["data"]) == ([16], "synthetic")
    assert (pipeline["progress_every"], pipeline["rounds"], pipeline["timeout"]) == ([0, 1], 3, 900.0)


def test_runtime_jax_makes_gpu_and_xla_cells_jax_cells_on_the_device_jax_picks(monkeypatch, tmp_path):
    """accelerator=gpu with runtime=jax is XLA on the GPU in the bench as in fit, beside the eager GPU cell; and a JAX
    cell's process is not pinned to XLA:CPU by the PJRT_DEVICE torch_xla's cells get, so JAX takes its own GPU."""
    from xla_train.bench import cell
    from xla_train.bench import sweep as bench

    class Planned(Exception):
        pass

    cells = {}
    monkeypatch.setattr(bench, "check_accelerators", lambda accelerators: accelerators)
    monkeypatch.setattr(bench, "run_rounds", lambda c, *a, **k: cells.update(c) or (_ for _ in ()).throw(Planned()))
    with pytest.raises(Planned):
        bench.sweep("quickstart", ["gpu", "xla"], ["auto", "jax"], batch_sizes=[8], runs_dir=str(tmp_path))
    assert sorted((c["accelerator"], c["runtime"]) for c in cells.values()) == [
        ("gpu", "auto"),
        ("gpu", "jax"),
        ("xla", "auto"),
        ("xla", "jax"),
    ]
    jax_cell = next(c for c in cells.values() if c["accelerator"] == "xla" and c["runtime"] == "jax")
    envs = []
    monkeypatch.setattr(cell, "run_logged", lambda args, log, timeout, env: envs.append(env) or 1)
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert "died" in cell.run_cell(jax_cell, tmp_path / "cell", 10)["error"]
    assert "PJRT_DEVICE" not in envs[0]


@pytest.mark.parametrize(
    "flags, named",
    [
        ("fpu sse2 avx2 fma", "no AVX-512"),
        ("avx2 avx512f avx512bw", "AVX-512, no bf16"),
        ("avx2 avx512f avx512_bf16", "AVX-512, AVX512-BF16"),
        ("avx512f avx512_bf16 amx_bf16 amx_tile", "AVX-512, AVX512-BF16, AMX-BF16"),
    ],
)
def test_a_tables_host_cpu_names_its_vector_units_which_a_vms_model_name_hides(flags, named, tmp_path):
    """The same "AMD EPYC" VM name came with and without AVX-512 on different days, and XLA:CPU's speed differed
    between them: the units go on every table's hardware line."""
    from xla_train.bench import report

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n"
    )
    assert report.cpu_vector_units(cpuinfo) == named
    assert report.cpu_vector_units(tmp_path / "absent") == ""


def test_a_bench_cell_reads_no_compile_cache_so_its_compile_is_timed(monkeypatch):
    """compile_cache=auto reads the last run's programs back on a TPU (and on a GPU with runtime=jax): a cell that did
    would time a read and call it a compile. No TPU here, so the cell's plan is caught as it is asked for."""
    import xla_train.runtime.plan as plan
    from xla_train.bench import loops

    class Planned(Exception):
        pass

    asked = {}

    def plan_hardware(*args, **kwargs):
        asked.update(kwargs)
        raise Planned

    monkeypatch.setattr(plan, "plan_hardware", plan_hardware)
    with pytest.raises(Planned):
        loops.LightningLoop({"recipe": "quickstart", "accelerator": "xla", "runtime": "jax", "batch": 32}).run()
    assert asked["compile_cache"] == "off"


def test_a_jax_cells_clock_times_each_execution_not_the_one_before_it():
    """JAX dispatches a program and returns; the engine waits for it only as it dispatches the next. Unless the
    clock waits at each reading, as it does for CUDA, an execution's time lands in the next reading: with two timed
    executions the readings were about 0 and twice the step, and the median of the rounds' pooled readings fell
    between them (the IMDB LSTM's cells before 2026-11-29 evening)."""
    import time

    from xla_train.bench.timing import Stopwatch
    from xla_train.runtime.jax.backend import JaxBackend

    run_s = 0.05  # one execution on the device

    class Device(JaxBackend):
        busy_until = 0.0

        def dispatch(self) -> None:  # JaxEngine.train: wait for the one in flight, then queue this one
            self.wait(None)
            self.busy_until = time.perf_counter() + run_s

        def wait(self, device) -> None:
            time.sleep(max(0.0, self.busy_until - time.perf_counter()))

        def counters(self):
            return 0, 0.0, 0

        def sync_clock(self, cpu: bool = False, compiling: bool = False):
            return lambda: 0.0

    device, k = Device(), 2
    clock = Stopwatch(warmup=2 * k, steps=2 * k, device=None, k=k, backend=device)
    for step in range(clock.total):
        clock.batch_ready(step)
        if step % k == k - 1:
            device.dispatch()
        clock.step_done(step)
    times = clock.result()["step_times_ms"]
    assert len(times) == 2
    assert all(0.8 * run_s / k * 1e3 < t < 1.5 * run_s / k * 1e3 for t in times), times
