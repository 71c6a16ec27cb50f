"""Names resolved once (runtime/registry.py): runtime=auto's rule on each combination of what is installed and the
platform, a runtime asked for but not installed, and a new runtime as one registry entry that `devices` lists."""

from __future__ import annotations

import sys

import pytest

from xla_train.errors import ConfigError
from xla_train.runtime import registry
from xla_train.runtime.device_report import DeviceReport

TORCH_XLA, JAX = registry.RUNTIMES["torch_xla"], registry.RUNTIMES["jax"]


@pytest.mark.parametrize(
    "platform, installed, libtpu, expected",
    [
        ("cpu", ("torch_xla", "jax"), None, "torch_xla"),  # the CPU: torch_xla where installed
        ("cpu", ("jax",), None, "jax"),  # else JAX
        ("cpu", ("torch_xla",), None, "torch_xla"),
        ("cpu", (), None, None),
        ("gpu", ("torch_xla", "jax"), None, "jax"),  # a GPU: JAX (torch_xla 2.9 has no GPU build)
        ("gpu", ("torch_xla",), None, None),
        ("tpu", ("torch_xla",), "0.0.21", "torch_xla"),  # a TPU: the runtime whose TPU build is installed
        ("tpu", ("jax",), "0.0.42", "jax"),
        ("tpu", ("torch_xla", "jax"), "0.0.42", "jax"),  # both CPU builds, jax[tpu]'s libtpu: JAX
        ("tpu", ("torch_xla", "jax"), "0.0.21.post1", "torch_xla"),  # torch-xla[tpu]'s libtpu: torch_xla
        ("tpu", ("torch_xla", "jax"), None, "torch_xla"),  # no libtpu to tell: the registry's order
        ("tpu", ("jax",), "0.0.21", "jax"),  # the one installed, whatever libtpu says
        ("tpu", (), "0.0.42", None),
    ],
)
def test_auto_takes_the_runtime_for_the_platform_and_what_is_installed(platform, installed, libtpu, expected):
    chosen = registry.choose_auto(platform, [registry.RUNTIMES[n] for n in installed], libtpu)
    assert (chosen.name if chosen else None) == expected


@pytest.fixture
def only(monkeypatch):
    """The registered runtimes that count as installed: the names given."""

    def installed(*names):
        for runtime in registry.RUNTIMES.values():
            why = None if runtime.name in names else "needs it, which is not installed"
            monkeypatch.setattr(runtime.module("devices"), "missing", lambda why=why: why)

    return installed


def test_auto_on_this_cpu_takes_jax_where_torch_xla_is_not_installed(only, monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    monkeypatch.setattr(registry.probe, "tpu_chips", lambda root=None: 0)
    only("jax")
    assert registry.resolve_runtime("auto", "xla") is JAX
    only("torch_xla", "jax")
    assert registry.resolve_runtime("auto", "xla") is TORCH_XLA
    assert registry.resolve_runtime("auto", "cpu") is registry.EAGER  # accelerator=cpu is eager PyTorch
    assert registry.resolve_runtime("auto", "gpu") is registry.EAGER  # CUDA's own, unless XLA is named
    assert registry.resolve_runtime("jax", "gpu", platform=lambda: "gpu") is JAX
    only()
    with pytest.raises(ConfigError, match=r"pip install 'xla_train\[torch-xla\]' or 'xla_train\[jax\]'"):
        registry.resolve_runtime("auto", "xla")


@pytest.mark.parametrize("name, extra", [("torch_xla", "torch-xla"), ("jax", "jax")])
def test_a_runtime_asked_for_but_not_installed_is_one_line_naming_its_extra(only, name, extra):
    only(*(n for n in registry.RUNTIMES if n != name))
    with pytest.raises(ConfigError) as e:
        registry.resolve_runtime(name, "xla", platform=lambda: "cpu")
    assert str(e.value) == f"runtime={name} needs it, which is not installed: pip install 'xla_train[{extra}]'"


def test_a_runtime_named_off_its_platforms_is_refused():
    with pytest.raises(ConfigError, match="runtime=torch_xla does not run on a GPU"):
        registry.resolve_runtime("torch_xla", "gpu", platform=lambda: "gpu")


def test_each_platform_has_one_spelling():
    assert [registry.platform_named(n) for n in ("CPU", "tpu", "cuda", "GPU")] == ["cpu", "tpu", "gpu", "gpu"]
    with pytest.raises(ConfigError):
        registry.platform_named("npu")


def test_a_stub_runtime_is_one_folder_and_one_entry_and_devices_lists_it(tmp_path, monkeypatch, only):
    """Adding a runtime (docs/layout.md): a folder with the runtimes' file names, one registry entry. `devices` then
    lists it beside the runtime auto takes, and runtime= accepts its name."""
    folder = tmp_path / "stub_runtime"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "devices.py").write_text(
        "from xla_train.runtime.device_report import DeviceReport\n\n"
        "def missing():\n    return None\n\n"
        "def started():\n    return False\n\n"
        "def report(kind):\n    return DeviceReport(kind, 'Stub chip', ('stub:0', 'stub:1'), 'a stub', 'stub')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    only("torch_xla", "jax")
    stub = registry.Runtime("stub", "stub_runtime", "stub", ("cpu",))
    try:
        registry.register(stub)
        from xla_train.runtime import devices

        monkeypatch.setattr(
            TORCH_XLA.module("devices"), "report", lambda kind: DeviceReport(kind, "CPU", ("xla:0",), "x")
        )
        monkeypatch.setattr(
            JAX.module("devices"), "report", lambda kind: DeviceReport(kind, "JAX cpu", ("cpu:0",), "j")
        )
        monkeypatch.delenv("PJRT_DEVICE", raising=False)
        monkeypatch.setattr(registry.probe, "tpu_chips", lambda root=None: 0)
        report = devices.describe_devices("xla")
        assert report.names == ("xla:0",)  # auto takes torch_xla, the first registered
        assert "runtime=auto takes torch_xla" in report.detail
        listed = str(report)
        assert "2 Stub chip devices" in listed and "stub:1  Stub chip" in listed, listed
        assert "stub" in registry.runtime_names()
        assert devices.describe_devices("xla", "stub").names == ("stub:0", "stub:1")
    finally:
        registry.unregister("stub")
        sys.modules.pop("stub_runtime.devices", None)
        sys.modules.pop("stub_runtime", None)
    assert "stub" not in registry.runtime_names()


def test_devices_names_the_extra_of_a_runtime_not_installed(only, monkeypatch):
    from xla_train.runtime import devices

    only("torch_xla")
    monkeypatch.setattr(TORCH_XLA.module("devices"), "report", lambda kind: DeviceReport(kind, "CPU", ("xla:0",), "x"))
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    monkeypatch.setattr(registry.probe, "tpu_chips", lambda root=None: 0)
    listed = str(devices.describe_devices("xla"))
    assert "runtime=jax: needs it, which is not installed: pip install 'xla_train[jax]'" in listed, listed


def test_a_run_loads_only_its_own_runtime_where_both_are_installed(runtime, tmp_path):
    """Both runtimes are installed here, as in every test environment: a fit on one must not load the other's
    packages (torch_xla 2.9 imports jax where it can, which starts JAX's own XLA client beside torch_xla's)."""
    from helpers import SCRIPTS, cli_env, script_json

    args = ["recipe=quickstart", f"runtime={runtime}", "accelerator=xla", "epochs=1", "predict_samples=0"]
    args += ["trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "progress_every=0"]
    out = script_json(SCRIPTS / "runtime_modules.py", env=cli_env(1), cwd=tmp_path, warm=False, args=args)
    assert out["code"] == 0, out
    own = {"torch_xla": {"torch_xla"}, "jax": {"jax", "jaxlib", "torchax"}}[runtime]  # the fixture's runtimes
    assert {name for name, loaded in out["loaded"].items() if loaded} == own, out


def test_asking_whether_a_runtime_started_imports_none():
    """bench asks before each cell whether this process holds a runtime (a TPU's chips): asking must not import one."""
    import subprocess

    code = (
        "import sys; from xla_train.runtime.registry import runtime_started; "
        "print(runtime_started(), 'torch_xla' in sys.modules, 'jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False", "False"], out.stdout + out.stderr[-2000:]
