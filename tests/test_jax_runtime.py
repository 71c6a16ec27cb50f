"""runtime=jax: the engine on JAX through torchax computes what eager torch computes, on 1 and 8 CPU devices, and a
fit on it keeps the torch_xla path's guarantees (one compile per phase, BatchNorm statistics that move, exact resume,
checkpoints any runtime loads; test_dropout.py holds dropout's on both runtimes)."""

import pytest
import torch

from helpers import SCRIPTS, TESTS, cli_env, path_with_tests, require, run_cli, script_json
from helpers.packed import CASES as PACKED_CASES

require("torchax")

ENGINE = TESTS / "jax_engine_check.py"


def engine_check(devices: int, *args: str) -> dict:
    """tests/jax_engine_check.py in a process of its own (JAX fixes its CPU device count as it starts)."""
    return script_json(ENGINE, env=cli_env(devices, PYTHONPATH=path_with_tests()), args=[devices, *args])


@pytest.mark.parametrize("devices, loop", [(1, "unroll"), (8, "unroll"), (1, "while")])
def test_steps_on_jax_match_eager_torch(devices, loop):
    """SGD with momentum on a BatchNorm net, 5 steps one a program and then 3 as one program of K=4 (a short
    group), its steps unrolled or a loop: weights, BatchNorm's running statistics and its step count as eager torch
    leaves them."""
    out = engine_check(devices, "match", loop)
    assert out["devices"] == devices
    assert out["weights"] < 2e-6, out
    assert out["running_stats"] < 2e-6, out
    assert out["num_batches_tracked"] == [8, "torch.int64"], out
    assert out["stats_moved"] > 1e-3, out  # the statistics really moved (torchax as shipped leaves them)


@pytest.fixture(scope="module")
def rnn_check() -> dict:
    return engine_check(1, "rnn")


def test_recurrent_layers_run_as_scans_that_match_nn(rnn_check):
    """A masked LSTM reading its final state and a two-layer bidirectional GRU reading every output, swapped for
    the scan on JAX (custom backward included): the weights after 3 steps are nn's, and nn's modules come back."""
    out = rnn_check
    for name in ("lstm", "gru"):
        assert out[name] < 1e-6 and out[f"{name}_moved"] > 1e-4 and out[f"{name}_restored"], out
    assert out["lstm_chunks"] == [1] and out["gru_chunks"] == [5], out  # 5 steps a loop iteration, 2 left over


@pytest.mark.parametrize("case", list(PACKED_CASES))
def test_a_packed_batch_on_jax_computes_what_nn_computes(rnn_check, case):
    """tests/helpers/packed.py's nets, which pack their padded batch (lengths .cpu(), enforce_sorted=False), run as
    the scan inside one jitted program, where no value can be read on the host: outputs, final states, lengths and
    gradients are nn's on the CPU."""
    found = rnn_check["packed"][case]
    for name, (shape, nn_shape, error) in found.items():
        assert shape == nn_shape and error < 1e-5, (name, shape, nn_shape, error)
    assert {"out", "state 0", "d x", "d rnn.weight_hh_l0", "lengths"} <= set(found)


def test_the_scans_weight_gradient_keeps_a_split_batch_split():
    """On one device the LSTM's weight gradient merges the steps and the batch into one product (XLA:CPU transposed
    the gates' gradients for einsum's two contracting dims); built for 8 devices it keeps them apart, so a batch
    split over 8 devices is gathered nowhere in the gradients' program, where the one-device form gathers it. Both
    give the same gradients."""
    out = engine_check(8, "split")
    assert out["built_for_8"] == [] and out["built_for_1"] == ["all-gather"], out
    assert out["apart"] < 1e-5, out


def test_the_scans_time_steps_per_loop_iteration_are_the_platforms_on_jax(monkeypatch):
    """4 on a GPU (docs/results.md, "The scan's chunk on a GPU"), 1 on the CPU and a TPU; the scan_chunk setting wins.
    The platform is set on the engine: the strategy's swap reads it, whatever devices this machine has."""
    import jax
    from torch import nn

    from xla_train.runtime.jax.strategy import JaxStrategy
    from xla_train.runtime.grouping import GroupingSettings
    from xla_train.runtime.layers.scan_rnn import ScanRNN

    def chunks(platform: str, setting: int | None = None) -> list[int]:
        strategy = JaxStrategy(jax.devices("cpu")[:1])
        strategy.plan_grouping(GroupingSettings(), scan_chunk=setting)
        strategy.engine.platform = platform
        strategy.model = nn.Sequential(nn.LSTM(3, 4), nn.GRU(4, 4))
        strategy.model_to_device()
        scans = [m for m in strategy.model.modules() if isinstance(m, ScanRNN)]
        assert [m.recurrence.devices for m in scans] == [1, 1]  # built for the engine's one device
        return [m.chunk for m in scans]

    assert chunks("gpu") == [4, 4] and chunks("cpu") == [1, 1] and chunks("tpu") == [1, 1]
    assert chunks("gpu", 2) == [2, 2] and chunks("cpu", 3) == [3, 3]


def test_a_step_is_traced_as_one_program_and_a_net_without_a_convolution_compiles_at_level_2(rnn_check):
    """The LSTM's and the GRU's first programs compile alone: no op of their step runs on its own while traced
    (under jax.ensure_compile_time_eval around the whole step, the IMDB LSTM's made about 15). Host tensors made while
    traced stay constants: the image recipes' channel statistics (test_recipes.py::test_every_recipe_and_a_users_folder_train_on_each_runtime).
    On XLA:CPU a net without a convolution compiles at XLA's backend level 2, one with a convolution at the default;
    a level given in XLA_FLAGS is kept."""
    out = rnn_check
    for name in ("lstm", "gru"):
        assert out[f"{name}_first_compiles"] == [f"jit({out['prefix']}train1)"], out
    assert out["lstm_options"].get("xla_backend_optimization_level") == 2, out
    assert "xla_backend_optimization_level" not in out["conv_options"], out
    assert "xla_backend_optimization_level" not in out["given_options"], out


def test_runtime_auto_trains_on_jax_where_torch_xla_does_not_import(tmp_path):
    """As on a machine without torch_xla (tests/no_torch_xla/ makes its import fail, as an uninstalled package's
    does): runtime=auto picks JAX, and says so."""
    env = cli_env(1, PYTHONPATH=f"{TESTS / 'no_torch_xla'}:{path_with_tests()}")
    proc = run_cli("recipe=quickstart", "model.net.class_path=probes.TinyNet", "epochs=1", cwd=tmp_path, env=env)
    assert "runtime: jax (auto: a CPU, with jax installed here)" in proc.stdout, proc.stdout[-2000:]
    assert "held-out test accuracy" in proc.stdout


def test_torch_xlas_own_copy_of_torchax_is_named_in_one_line(tmp_path):
    """torch_xla 2.9's wheel carries an older torchax, which a fresh install of the jax extra leaves on disk in place
    of torchax 0.0.13's files: a torchax whose files are not its own release's is refused, saying how to put them
    back (here a copy of the package, its tensor.py changed, ahead on the path)."""
    import shutil
    from importlib.util import find_spec

    fake = tmp_path / "path" / "torchax"
    shutil.copytree(list(find_spec("torchax").submodule_search_locations)[0], fake)
    (fake / "tensor.py").write_text((fake / "tensor.py").read_text() + "\n# another release\n")
    env = cli_env(1, PYTHONPATH=f"{tmp_path / 'path'}:{path_with_tests()}")
    proc = run_cli("recipe=quickstart", "runtime=jax", cwd=tmp_path, env=env, check=False)
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]  # Lightning's seed line aside
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert errors[0].endswith("pip install --force-reinstall --no-deps torchax==0.0.13"), errors
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("net", ["PoissonNet", "BrightOnly"])
def test_a_net_jax_cannot_compile_is_one_line_that_suggests_torch_xla(tmp_path, net):
    """An op torchax cannot lower (aten::poisson), or a shape that depends on the data (x[x > 0]): the first step's
    trace fails, and the command says which in one line, with runtime=torch_xla, and writes no checkpoint."""
    proc = run_cli(
        "recipe=quickstart",
        "runtime=jax",
        f"net=user_nets.{net}",
        "epochs=1",
        cwd=tmp_path,
        check=False,
        env=cli_env(1, PYTHONPATH=path_with_tests()),
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("xla_train: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "runtime=torch_xla" in errors[0] and ("aten::poisson" in errors[0]) == (net == "PoissonNet"), errors
    assert not list(tmp_path.glob("runs/**/*.ckpt"))


def test_a_runtime_that_is_not_known_is_one_line(tmp_path):
    proc = run_cli("recipe=quickstart", "runtime=tpu", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "runtime" in proc.stderr, proc.stderr


@pytest.mark.fresh_xla(devices=1)
def test_bf16_on_jax_casts_what_torch_autocast_casts():
    """precision=bf16-mixed on JAX: F.linear, convolutions and matmul run in bf16 as torch.autocast runs them (torchax
    0.0.13 left linear and conv in float32, and a conv on a bf16 input with a float32 bias raised), and cat, stack and
    index_copy promote to the widest input (it raised AttributeError, so the IMDB LSTM, whose table projection
    concatenates, could not train in bf16)."""
    import torch.nn.functional as F

    from xla_train.runtime.jax import compat

    def ops(device):
        x, w, b = (torch.ones(*s, device=device) for s in ((2, 3), (4, 3), (4,)))
        img, k, kb = (torch.ones(*s, device=device) for s in ((1, 3, 8, 8), (5, 3, 3, 3), (5,)))
        half = torch.ones(3, device=device, dtype=torch.bfloat16)
        copied = torch.zeros(4, device=device, dtype=torch.bfloat16).index_copy(
            0, torch.tensor([1], device=device), x[0, :1]
        )
        out = {
            "linear": F.linear(x, w, b),
            "conv2d": F.conv2d(img, k),
            "conv2d_on_bf16": F.conv2d(img.bfloat16(), k, kb),  # a second conv: its input bf16, its bias not
            "conv1d": F.conv1d(img[:, :, 0], k[:, :, 0], kb),
            "matmul": x @ w.t(),
            "cat": torch.cat([x[0], half]),
            "stack": torch.stack([half, half]),
            "index_copy": copied,
        }
        return {name: (t.dtype, t.shape, t.float().sum().item()) for name, t in out.items()}

    with torch.autocast("cpu", torch.bfloat16):
        expected = ops("cpu")
    env = compat.environment()
    with env, compat.with_autocast(env, torch.bfloat16):
        got = ops("jax")
    assert got == expected
    assert expected["linear"][0] == expected["conv2d"][0] == torch.bfloat16 == expected["stack"][0]
    assert expected["cat"][0] == expected["index_copy"][0] == torch.float32


def test_a_compile_cache_folder_is_read_back_by_the_next_run_on_jax(tmp_path):
    """compile_cache=DIR on runtime=jax, as on torch_xla on a TPU: the first fit writes its programs to the folder and
    says where; the next reads them back instead of compiling them, says so, and trains to the same weights."""
    out = script_json(SCRIPTS / "jax_compile_cache.py", env=cli_env(1, PYTHONPATH=path_with_tests()), args=[tmp_path])
    first, second = out["runs"]
    assert first["cache_line"] and second["cache_line"], out
    assert first["files"] > 0 and first["read_back"] == 0, out
    assert second["read_back"] >= 1 and second["compiled"].startswith("train 1 ("), out
    assert out["same_weights"], out


def test_compile_cache_auto_on_jax_is_the_machines_own_folder_on_a_tpu_or_gpu_and_none_on_the_cpu(
    tmp_path, monkeypatch
):
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    from xla_train.errors import ConfigError
    from xla_train.runtime.jax.plan import configure_compile_cache
    from xla_train.runtime.cache_folder import default_compile_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = default_compile_cache("jax_compile_cache")
    assert folder == str(tmp_path / "xla_train" / "jax_compile_cache")  # not torch_xla's
    assert (
        configure_compile_cache("auto", "cpu", folder) is None and configure_compile_cache("off", "tpu", folder) is None
    )
    try:
        for platform in ("tpu", "gpu"):
            assert configure_compile_cache("auto", platform, folder) == folder
            assert jax.config.jax_compilation_cache_dir == folder
        # a later run in the same process (a notebook, or a benchmark cell) that keeps none does not read this one
        assert configure_compile_cache("off", "tpu", folder) is None and jax.config.jax_compilation_cache_dir is None
        # a folder that cannot be made is the user's setting: one line (ConfigError), and no cache kept
        with pytest.raises(ConfigError, match=r"compile_cache=/proc/no/such: cannot make the folder"):
            configure_compile_cache("/proc/no/such", "cpu", folder)
    finally:  # this process's later JAX runs keep none
        jax.config.update("jax_compilation_cache_dir", None)
        compilation_cache.reset_cache()
