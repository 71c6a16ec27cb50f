"""accelerator=cpu|gpu at the hardware's speed (runtime/eager/fast_path.py): the defaults per hardware, an explicit key
winning, torch.compile in the Lightning path, and checkpoints that still load as float32 eager nets."""

import re

import pytest
import torch

from helpers import run_cli
from xla_train.runtime import backend
from xla_train.runtime.eager import fast_path
from xla_train.runtime.plan import plan_hardware

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Some CPU
flags\t\t: fpu vme de pse avx2 avx512f {extra}
bogomips\t: 4000.00

processor\t: 1
flags\t\t: fpu vme de pse avx2 avx512f {extra}
"""


@pytest.mark.parametrize(
    "extra, flag",
    [("amx_bf16 amx_tile", "amx_bf16"), ("avx512_bf16 avx512_vnni", "avx512_bf16"), ("avx512_vnni", None), ("", None)],
)
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, extra, flag):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO.format(extra=extra))
    assert backend.cpu_bf16_flag(info) == flag
    assert backend.cpu_bf16_flag(tmp_path / "absent") is None  # not Linux: no native bf16 claimed


@pytest.fixture
def cpu_with(monkeypatch):
    def make(flag):
        monkeypatch.setattr(backend, "cpu_bf16_flag", lambda cpuinfo=None: flag)

    return make


@pytest.fixture
def fake_gpu(monkeypatch):
    def make(capability, bf16):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)

    return make


def test_a_native_bf16_cpu_defaults_to_bf16_autocast_and_compiles_long_runs_only_with_amx(cpu_with):
    cpu_with("avx512_bf16")
    plan = plan_hardware("cpu")
    assert plan.trainer_kwargs["precision"] == "bf16-mixed"
    fp = plan.fast_path
    assert (fp.channels_last, fp.compile) == ("auto", False)  # channels_last: decided against the net
    assert "the CPU has avx512_bf16" in fp.summary() and "not faster on a CPU without AMX" in fp.summary()
    cpu_with("amx_bf16")
    fp = plan_hardware("cpu").fast_path
    assert (fp.precision, fp.compile) == ("bf16-mixed", "auto")  # decided against the run's length


def test_a_cpu_without_native_bf16_stays_fp32(cpu_with):
    cpu_with(None)
    plan = plan_hardware("cpu")
    assert plan.trainer_kwargs["precision"] == "32-true"
    assert "neither amx_bf16 nor avx512_bf16" in plan.fast_path.summary()


@pytest.mark.parametrize("given", ["32", "32-true", "16-mixed", "bf16-mixed"])
def test_an_explicit_precision_wins_on_any_cpu(cpu_with, given):
    for flag in ("amx_bf16", None):
        cpu_with(flag)
        fp = fast_path.choose("cpu", given, compile="false", channels_last=False)
        assert fp.precision == given and fp.why["precision"] == "precision= as given"
        assert (fp.compile, fp.channels_last) == (False, False)


@pytest.mark.parametrize(
    "capability, bf16, expected",
    [((8, 0), True, "bf16-mixed"), ((9, 0), True, "bf16-mixed"), ((7, 5), False, "32-true"), ((7, 0), True, "32-true")],
)
def test_gpu_defaults_follow_its_compute_capability(fake_gpu, cpu_with, capability, bf16, expected):
    cpu_with("amx_bf16")  # the host CPU does not decide for the GPU
    fake_gpu(capability, bf16)
    plan = plan_hardware("gpu")
    assert plan.kind == "gpu" and plan.trainer_kwargs["accelerator"] == "gpu"
    assert plan.trainer_kwargs["precision"] == expected
    assert fast_path.choose("gpu", "32").precision == "32"


@pytest.mark.parametrize("key", ["compile", "channels_last"])
def test_compile_and_channels_last_are_refused_on_xla_in_one_line(tmp_path, monkeypatch, capsys, key, runtime):
    from helpers import runtime_key
    from xla_train.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["fit", "recipe=quickstart", "accelerator=xla", runtime_key(runtime), f"{key}=true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xla_train: error: ") and err.count("\n") == 1, err
    assert f"{key}=true is" in err and "accelerator=cpu or gpu" in err and "leave" in err
    assert not (tmp_path / "runs").exists()


def test_a_bad_compile_value_is_one_line(tmp_path, monkeypatch, capsys):
    from xla_train.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["fit", "recipe=quickstart", "accelerator=cpu", "compile=maybe"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compile" in err, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "samples, expected", [(fast_path.COMPILE_PAYBACK_SAMPLES - 1, False), (fast_path.COMPILE_PAYBACK_SAMPLES, True)]
)
def test_compile_auto_compiles_only_a_run_long_enough_to_pay_back(monkeypatch, cpu_with, samples, expected):
    from xla_train.models import CifarCNN
    from xla_train.models.lstm import SentimentLSTM

    class Module(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

    cpu_with("amx_bf16")
    monkeypatch.setattr(fast_path.FastPathCallback, "_training_samples", staticmethod(lambda trainer: samples))
    cb = fast_path.FastPathCallback(fast_path.choose("cpu", "32"))
    module = Module(CifarCNN())
    cb.setup(None, module, "fit")
    assert not cb.compiled and cb.fast_path.compile == "auto"  # counted once a resumed run's data is restored
    cb.on_fit_start(None, module)
    assert cb.compiled is expected and cb.fast_path.compile is expected
    assert (module.net._compiled_call_impl is not None) is expected
    assert module.net.features[1].weight.is_contiguous(memory_format=torch.channels_last)  # a conv net
    assert f"{samples:,} training samples" in cb.fast_path.summary()
    lstm = Module(SentimentLSTM(vocab_size=50))
    cb = fast_path.FastPathCallback(fast_path.choose("cpu", "32", compile=False))
    cb.setup(None, lstm, "validate")
    assert not cb.channels_last and "not a conv net" in cb.fast_path.summary()


def test_an_explicit_bf16_runs_nn_lstm_in_float32_on_a_cpu_without_native_bf16_and_gives_the_class_back(cpu_with):
    """oneDNN has no bf16 LSTM primitive there: under bf16 autocast nn.LSTM raised ('could not create a primitive
    descriptor for the LSTM forward propagation primitive'). The layer runs in float32; the rest still autocasts."""
    from xla_train.models.lstm import MaskedLSTM, SentimentLSTM

    class Module(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

    cpu_with(None)
    module = Module(SentimentLSTM(vocab_size=50))
    cb = fast_path.FastPathCallback(fast_path.choose("cpu", "bf16-mixed", compile=False))
    cb.setup(None, module, "fit")
    seen = []
    module.net.lstm.register_forward_hook(
        lambda m, args, out: seen.append(out[0].data.dtype)
    )  # a tensor, or a packed one
    tokens = torch.randint(1, 50, (4, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = module.net(tokens)  # the masked path (tokens hold no padding id here: the mask is all real)
        packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(4, 12, 128), [12, 9, 5, 1], batch_first=True)
        module.net.lstm(packed)
    assert seen == [torch.float32, torch.float32] and logits.dtype == torch.bfloat16  # the head still autocasts
    assert "nn.LSTM in float32" in cb.fast_path.summary()
    cb.teardown(None, module, "fit")
    assert type(module.net.lstm) is MaskedLSTM
    cpu_with("avx512_bf16")  # native bf16: oneDNN has the primitive, and the layer is left alone
    cb = fast_path.FastPathCallback(fast_path.choose("cpu", "bf16-mixed", compile=False))
    cb.setup(None, module, "fit")
    assert type(module.net.lstm) is MaskedLSTM and "nn.LSTM" not in cb.fast_path.summary()


def _check_checkpoint_serves_like_fp32(ckpt_path, images, net=None):
    """float32 weights, no compiled wrapper's keys, and load_for_inference predicts as a plain fp32 load does."""
    from xla_train.checkpoint import net_state_dict, read_inference_block
    from xla_train.models.reference import NetRef, build
    from xla_train.objective import probabilities
    from xla_train.serve.predictor import load_for_inference

    ckpt = torch.load(ckpt_path, weights_only=True)
    floats = {v.dtype for v in ckpt["state_dict"].values() if v.is_floating_point()}
    assert floats == {torch.float32}
    assert not [k for k in ckpt["state_dict"] if "_orig_mod" in k]
    predictor = load_for_inference(ckpt_path, net=net)
    block = read_inference_block(ckpt, ckpt_path)
    plain = build(NetRef.from_block(block, ckpt_path), ckpt_path, given=net)
    plain.load_state_dict({k: v.contiguous() for k, v in net_state_dict(ckpt).items()})
    plain.eval()
    x = predictor.preprocess(images)
    with torch.no_grad():
        assert torch.equal(predictor.probabilities(images), probabilities(plain(x)))


def _digits_images(n=16):
    from xla_train.data.digits import load_digits_rgb32

    return load_digits_rgb32()[0][-n:]


def test_a_bf16_channels_last_run_reports_its_choice_and_writes_float32(tmp_path):
    proc = run_cli(
        "fit",
        "recipe=quickstart",
        "accelerator=cpu",
        "precision=bf16-mixed",
        "channels_last=true",
        "epochs=1",
        "trainer.limit_train_batches=4",
        "trainer.limit_val_batches=2",
        "test_after_fit=false",
        "predict_samples=0",
        cwd=tmp_path,
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("fast path: "))
    assert "bf16-mixed (precision= as given)" in line and "channels_last (channels_last= as given)" in line
    assert re.search(
        r"eager \(default: (128 training samples < [\d,]+ to pay back its first compile|compiled "
        r"steps were not faster on a CPU without AMX)\)",
        line,
    ), line
    assert "inductor" not in proc.stdout
    _check_checkpoint_serves_like_fp32(tmp_path / "runs/quickstart/version_0/checkpoints/last.ckpt", _digits_images())


@pytest.mark.slow
def test_compile_true_trains_the_quickstart_to_95_percent_and_serves_eagerly(tmp_path):
    proc = run_cli("fit", "recipe=quickstart", "accelerator=cpu", "compile=true", "epochs=3", cwd=tmp_path, timeout=900)
    assert "compiled (inductor) (compile= as given)" in proc.stdout
    epochs = [ln for ln in proc.stdout.splitlines() if "ms/step" in ln]
    assert len(epochs) == 3 and re.search(r"compile [\d.]+ s \(inductor, \d+ graphs?\)", epochs[0]), epochs
    acc = float(re.search(r"held-out test accuracy: ([\d.]+)", proc.stdout).group(1))
    assert acc >= 0.95, proc.stdout
    ckpt = next((tmp_path / "runs/quickstart/version_0/checkpoints").glob("best-*.ckpt"))
    _check_checkpoint_serves_like_fp32(ckpt, _digits_images())


def test_compile_true_on_a_tiny_net_writes_plain_keys_and_serves_eagerly(tmp_path):
    """The fast form of the slow quickstart test above: compile=true really compiles (inductor's graphs are
    counted), and the checkpoint holds the plain net's keys and serves eagerly on the CPU."""
    from probes import TinyNet

    proc = run_cli(
        "fit",
        "recipe=quickstart",
        "accelerator=cpu",
        "compile=true",
        "model.net.class_path=probes.TinyNet",
        "epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=0",
        "test_after_fit=false",
        "predict_samples=0",
        cwd=tmp_path,
    )
    assert "compiled (inductor) (compile= as given)" in proc.stdout
    epoch = next(ln for ln in proc.stdout.splitlines() if "ms/step" in ln)
    assert re.search(r"compile [\d.]+ s \(inductor, [1-9]\d* graphs?\)", epoch), epoch
    ckpt = tmp_path / "runs/quickstart/version_0/checkpoints/last.ckpt"
    _check_checkpoint_serves_like_fp32(ckpt, _digits_images(), net=TinyNet)  # a user's net: named to load
