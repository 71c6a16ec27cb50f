"""Every bad input ends in one line on stderr, a non-zero exit, and nothing written."""

import lightning.pytorch  # noqa: F401  its log handler keeps the sys.stderr of its import: not a capsys stream
import os
import sys

import pytest

from helpers import run_cli, run_paced, runtime_key
from xla_train.cli.main import main, split_argv
from xla_train.errors import ConfigError
from xla_train.config.recipes import ALIASES, available_recipes
from xla_train.config.run_spec import RunSpec


def at(config: dict, key: str):
    """The value at a dotted key of a nested config."""
    for part in key.split("."):
        config = config[part]
    return config


def test_key_values_and_aliases_land_at_their_config_keys_and_native_flags_stay_flags():
    spec = RunSpec.parse(
        "fit",
        {
            "recipe": "cifar10",
            "epochs": "3",
            "batch_size": "64",
            "lr": "0.01",
            "model.dropout": "0.3",
            "trainer.log_every_n_steps": "5",
        },
        ["--trainer.max_time=00:00:10:00"],
    )
    config = spec.config()
    assert config["recipe_name"] == "cifar10" and config["model"]["net"]["class_path"] == "xla_train.models.CifarCNN"
    for key, value in (
        ("trainer.max_epochs", "3"),
        ("data.init_args.batch_size", "64"),
        ("model.lr", "0.01"),
        ("model.net.init_args.dropout", "0.3"),
        ("trainer.log_every_n_steps", "5"),
    ):
        assert at(config, key) == value, key  # as the command line spelled it: jsonargparse types it
    assert spec.flags == ["--trainer.max_time=00:00:10:00"]  # parsed onto the config (config/lightning_cli.py)


def test_every_documented_alias_resolves():
    config = RunSpec.parse("fit", {"recipe": "cifar10", **{a: "1" for a in ALIASES if a not in ("ckpt", "net")}})
    config = config.config()
    for alias, key in ALIASES.items():
        if alias not in ("ckpt", "net"):
            assert at(config, key.replace("data.", "data.init_args.")) == "1", alias
    config = RunSpec.parse("fit", {"recipe": "cifar10", "net": "xla_train.models.CifarResNet"}).config()
    # the recipe's arguments for CifarCNN that CifarResNet takes too stay (dropout it does not take)
    assert config["model"]["net"] == {"class_path": "xla_train.models.CifarResNet", "init_args": {"num_classes": 10}}


def test_command_comes_first_and_defaults_to_fit():
    assert split_argv(["recipe=x", "a.b=1"])[0] == "fit"
    assert split_argv(["test", "recipe=x"])[:2] == ("test", {"recipe": "x"})
    assert split_argv(["--trainer.max_epochs", "3", "recipe=x"])[2] == ["--trainer.max_epochs", "3"]
    with pytest.raises(ConfigError, match="unexpected argument"):
        split_argv(["recipe=x", "stray"])


@pytest.mark.parametrize(
    "args,message",
    [
        (["recipe=nope"], "unknown recipe 'nope'; the recipes are: arrays, cifar10"),
        (["recipe=cifar10", "epochz=3"], "unknown key 'epochz'; did you mean epochs"),
        (["recipe=cifar10", "trainer.max_epoch=3"], "did you mean trainer.max_epochs"),
        (["recipe=cifar10", "trainer.max_epochs=abc"], "trainer.max_epochs: expected int or null, got 'abc'"),
        (["recipe=cifar10", "accelerator=cpu", "compile=maybe"], "compile: expected bool or 'auto', got 'maybe'"),
        (["recipe=cifar10", "seed=abc"], "seed_everything: expected bool or int, got 'abc'"),
        (["recipe=cifar10", "model.dropout=abc"], "model.net.dropout: expected float, got 'abc'"),
        (["recipe=cifar10", "model.optimizer=rmsprop"], "model.optimizer: expected"),
        (["recipe=cifar10", "batch_size=12", "accelerator=cpu"], "batch_size=12 is not a positive multiple of 8"),
        (["recipe=cifar10", "accelerator=quantum"], "accelerator='quantum' is not known"),
        (["recipe=cifar10", "accelerator=tpu"], "accelerator=tpu but"),
        (
            ["recipe=cifar10", "accelerator=cpu", "data_dir=missing", "download=false"],
            "missing/cifar-10-batches-py is missing",
        ),
        (
            ["recipe=cifar10", "accelerator=cpu", "strategy=bogus"],
            "strategy='bogus' cannot run on accelerator=cpu; use",
        ),
        (["recipe=cifar10", "accelerator=cpu", "strategy=xla"], "strategy='xla' cannot run on accelerator=cpu"),
        (["recipe=cifar10", "accelerator=cpu", "devices=abc"], "devices='abc' is not a device count; use a number"),
        (["recipe=cifar10", "accelerator=cpu", "devices=0"], "devices=0 must be at least 1"),
        (["recipe=cifar10", "accelerator=cpu", "devices=-3"], "devices=-3 must be at least 1"),
        (["recipe=quickstart", "ckpt=last"], "ckpt=last but no run of 'quickstart'"),
        (["fit"], "which recipe? add recipe=NAME"),
        (
            ["recipe=cifar10", "accelerator=cpu", "matmul_precision=high"],
            "matmul_precision=high sets XLA's float32 matmul precision; accelerator=cpu computes",
        ),
        # found by test_cli_fuzz.py's build-and-run fuzz: each was a traceback
        (["recipe=quickstart", "seed=-1"], "seed_everything: -1 is out of range"),
        (["recipe=quickstart", "lr=-1"], "model.lr=-1.0 must be positive"),
        (["recipe=quickstart", "model.weight_decay=-1"], "model.weight_decay=-1.0 must be 0 or more"),
        (["recipe=quickstart", "data.num_workers=-1"], "num_workers=-1 must be 0"),
        (["recipe=quickstart", "split_seed=-1"], "split_seed=-1 must be in [0, 2**32)"),
        (["recipe=quickstart", "val_fraction=1"], "val_fraction=1.0 must be in [0, 1)"),
        (["recipe=quickstart", "data.test_fraction=1.5"], "test_fraction=1.5 must be in (0, 1)"),
        (["recipe=quickstart", "trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches: not of type"),
        (["recipe=quickstart", "accelerator=cpu", "epochs=-2"], "trainer: `max_epochs` must be a non-negative"),
        (["recipe=quickstart", "model.net.num_classes=-1"], "model.net.num_classes=-1 must be at least 1"),
        (["recipe=cifar10", "model.dropout=2"], "model.net.dropout=2.0 must be in [0, 1)"),
        # a class's own argument typed as jsonargparse types a config: null is no int, and nothing is not either
        (["recipe=quickstart", "batch_size=null"], "data.batch_size: expected int, got 'None'"),
        (["recipe=quickstart", "model.net.num_classes="], "model.net.num_classes: expected int, got ''"),
        (["recipe=imdb", "model.net.hidden_size=0"], "model.net.hidden_size=0 must be at least 1"),
        (
            ["recipe=quickstart", "accelerator=cpu", "model.net.num_classes=1"],
            "the net (CifarCNN) gives 1 logit(s) per sample but the data has 10 classes (0, 1, 2, 3, 4, ...); its last "
            "layer must give 10; set model.net.num_classes=10",
        ),
    ],
)
def test_bad_input_is_one_line_nonzero_and_writes_nothing(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert main(args) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("xla_train: error: ") and message in last, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args,message",
    [
        (["accelerator=xla", "devices=0"], "devices=0 must be at least 1 (or auto for all)"),
        (  # each runtime's plan says it in its words
            ["accelerator=xla", "strategy=ddp_spawn"],
            {
                "torch_xla": "strategy='ddp_spawn' cannot run on accelerator=xla",
                "jax": "strategy='ddp_spawn' on runtime=jax; leave it at auto (one program drives every device)",
            },
        ),
        (["matmul_precision=fast"], "matmul_precision: expected one of 'default', 'high', 'highest', got 'fast'"),
        (["steps_per_execution=0"], "steps_per_execution: 0 is out of range (does not conform to restriction v>0)"),
        (["steps_per_execution=-3"], "steps_per_execution: -3 is out of range"),
        (["steps_per_execution=eight"], "steps_per_execution: expected PositiveInt or 'auto', got"),
        (["accelerator=xla", "epochs=1", "scan_chunk=zero"], ("error: scan_chunk", "zero")),
        (["accelerator=xla", "epochs=1", "scan_chunk=0"], ("error: scan_chunk", "0")),
        (["accelerator=xla", "epochs=1", "device_data_mb=-1"], ("error: device_data_mb", "-1")),
    ],
)
def test_a_bad_xla_setting_is_one_line_and_writes_nothing_on_either_runtime(
    tmp_path, monkeypatch, capsys, runtime, args, message
):
    """The XLA runtimes' own settings (devices, strategy, K, the scan's chunk, the device data budget, matmul
    precision) are checked as the command is read, before the run's folder is written or the runtime starts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert main(["recipe=cifar10", runtime_key(runtime), *args]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    message = message[runtime] if isinstance(message, dict) else message
    pieces = (message,) if isinstance(message, str) else message
    assert last.startswith("xla_train: error: ") and all(piece in last for piece in pieces), err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_real_entry_point_exits_nonzero_with_one_line(tmp_path):
    proc = run_cli("recipe=cifar10", "epochz=3", cwd=tmp_path, check=False, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["xla_train: error: unknown key 'epochz'; did you mean epochs?"]


def test_accelerator_tpu_is_refused_by_the_pci_probe_with_pjrt_device_unset_and_no_network(tmp_path):
    """The PCI-bus branch: no PJRT_DEVICE (or any TPU variable) tells the CLI what this machine is, and every
    network call fails loudly, so a metadata-server lookup would show as NETWORK ATTEMPT."""
    from pathlib import Path

    guard = str(Path(__file__).with_name("offline_cli.py"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "TPU_", "XRT_", "CPU_NUM_DEVICES"))}
    selftest = run_paced([sys.executable, guard, "--selftest"], 300, env=env)
    assert "NETWORK ATTEMPT" in selftest.stderr and "metadata refused" in selftest.stdout, selftest
    proc = run_paced([sys.executable, guard, "fit", "recipe=quickstart", "accelerator=tpu"], 300, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("xla_train: error: ")]
    assert errors == [
        "xla_train: error: accelerator=tpu but this machine has no TPU; use accelerator=xla (XLA on "
        "the CPU, PJRT_DEVICE=CPU) or accelerator=cpu"
    ], proc.stderr
    assert "Traceback" not in proc.stderr and "NETWORK ATTEMPT" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("accelerator", ["xla", "cpu"])
def test_a_run_without_a_tpu_asks_no_metadata_server_even_where_jax_set_its_variable(tmp_path, accelerator):
    """Lightning's device banner asks torch_xla how many TPU cores there are, which asked the TPU metadata server
    on every run (a network call), and with TPU_SKIP_MDS_QUERY set, as importing JAX or Keras sets it, raised a
    TypeError: no Trainer could be built. On XLA the network is refused loudly; on the CPU the variable is set."""
    from pathlib import Path

    guard = str(Path(__file__).with_name("offline_cli.py"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "TPU_", "XRT_", "CPU_NUM_DEVICES"))}
    if accelerator == "cpu":
        env["TPU_SKIP_MDS_QUERY"] = "1"
    command = [sys.executable, guard, "fit", "recipe=quickstart", "net=probes.TinyNet", f"accelerator={accelerator}"]
    command += ["epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "predict_samples=0"]
    proc = run_paced(command, 300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NETWORK ATTEMPT" not in proc.stderr and proc.stdout.strip().splitlines()[-1].startswith("time: ")


def test_recipes_dir_lists_every_recipe():
    assert {"quickstart", "cifar10"} <= set(available_recipes())


def test_resuming_from_another_recipes_checkpoint_is_refused(cpu_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ckpt = cpu_run / "checkpoints" / "last.ckpt"
    assert main(["fit", "recipe=quickstart", "accelerator=cpu", f"ckpt={ckpt}", "model.net.dense_dropout=0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "holds a cnn net" in err and "recipe quickstart builds a cnn net" in err and "dense_dropout" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content,message", [(b"", "is empty"), (b"garbage", "not a readable checkpoint")])
def test_resuming_from_a_broken_checkpoint_is_one_line(tmp_path, monkeypatch, capsys, content, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.ckpt").write_bytes(content)
    assert main(["fit", "recipe=quickstart", "accelerator=cpu", f"ckpt={tmp_path / 'x.ckpt'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([ln for ln in err if ln.startswith("xla_train: error:")]) == 1 and message in err[-1]
    assert [p.name for p in tmp_path.iterdir()] == ["x.ckpt"]


def test_limit_batches_of_1_is_one_batch_not_all(tmp_path, monkeypatch, capsys):
    """Lightning reads limit_train_batches=1 (int) as one batch and 1.0 as every batch; the CLI must keep the int."""
    import yaml

    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "recipe=quickstart",
                "limit_train_batches=1",
                "limit_val_batches=0.5",
                "limit_test_batches=1.0",
                "--print_config",
            ]
        )
        == 0
    )
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert (trainer["limit_train_batches"], trainer["limit_val_batches"], trainer["limit_test_batches"]) == (
        1,
        0.5,
        1.0,
    )
    assert type(trainer["limit_train_batches"]) is int and type(trainer["limit_test_batches"]) is float


@pytest.mark.parametrize(
    "kind,devices,expected",
    [
        ("cpu", "auto", "auto"),
        ("cpu", -1, "auto"),
        ("cpu", "2", 2),
        ("gpu", -1, -1),
        ("gpu", "0,1", [0, 1]),
        ("gpu", [1], [1]),
        ("gpu", 2, 2),
    ],
)
def test_good_cpu_and_gpu_devices_reach_lightning_as_it_reads_them(kind, devices, expected):
    from xla_train.runtime.eager.devices import lightning_devices as _lightning_devices

    assert _lightning_devices(kind, devices, gpus=2) == expected


def test_bad_gpu_devices_are_one_line():
    from xla_train.errors import HardwareError
    from xla_train.runtime.eager.devices import lightning_devices as _lightning_devices

    for bad in ("abc", 0, "-3", [], ["x"], [-1], True):
        with pytest.raises(HardwareError, match="GPU indices like 0,1"):
            _lightning_devices("gpu", bad, gpus=2)
    for too_many in (3, "0,2", [5]):
        with pytest.raises(HardwareError, match="this machine has 2 CUDA GPU"):
            _lightning_devices("gpu", too_many, gpus=2)


@pytest.mark.parametrize("args", [["fit", "--help"], ["test", "-h"], ["fit", "recipe=cifar10", "--help"]])
def test_help_lists_every_option_with_or_without_a_recipe(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 0
    out = capsys.readouterr().out
    for option in (
        "--trainer.max_epochs",
        "--trainer.accelerator",
        "--trainer.devices",
        "--model.lr",
        "--steps_per_execution",
        "--logger_kind",
    ):
        assert option in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["fit", "test"])
def test_a_command_builds_the_parser_of_its_own_subcommand_alone(command, tmp_path, monkeypatch, capsys):
    """Lightning builds each subcommand's parser from the Trainer's and every class's signatures: the other three
    would be most of a short run's time after its imports."""
    from lightning.pytorch.cli import LightningCLI

    built, prepare = [], LightningCLI._prepare_subcommand_parser

    def spy(self, klass, subcommand, **kwargs):
        built.append(subcommand)
        return prepare(self, klass, subcommand, **kwargs)

    monkeypatch.setattr(LightningCLI, "_prepare_subcommand_parser", spy)
    monkeypatch.chdir(tmp_path)
    assert main([command, "recipe=quickstart", "--print_config"]) == 0
    assert "class_path: xla_train.models.CifarCNN" in capsys.readouterr().out
    assert built == [command]


def test_lightnings_ddp_starts_every_process_with_the_users_command(tmp_path, monkeypatch):
    """accelerator=cpu devices=2 (and gpu devices=N) is Lightning's DDP: its launcher starts the other processes
    with this process's sys.argv, which must still be the user's command while the run starts (once it was emptied,
    and every other process stopped at "which recipe?")."""
    from lightning.fabric.strategies.launchers.subprocess_script import _basic_subprocess_cmd
    from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

    class Launched(Exception):
        pass

    def children(self):
        raise Launched(_basic_subprocess_cmd())

    argv = ["fit", "recipe=quickstart", "accelerator=cpu", "devices=2", "epochs=1", "predict_samples=0"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_SubprocessScriptLauncher, "_call_children_scripts", children)
    monkeypatch.setattr(sys, "argv", ["xla_train", *argv])
    with pytest.raises(Launched) as launched:
        main(argv)
    assert launched.value.args[0][-len(argv) :] == argv
