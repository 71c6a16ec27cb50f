"""Beyond one machine: TPU pod slices (one SPMD program over several hosts) and GPU nodes (Lightning's DDP).

No pod and no GPU here. A pod host is emulated on XLA:CPU by replacing the
runtime's answers about hosts (process index and count, devices per host);
everything xla_train derives from them runs for real: the strategy's ranks and
nodes, the data module's share of each global batch, the input sharding, who
writes, and the channel between host processes. GPU nodes are emulated by
torchrun's environment variables and a faked CUDA device count; the Trainer
is built, not run.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import cli_env, free_port, path_with_tests, run_paced, run_pod, script_json

BATCH = 8  # per device
GLOBAL_DEVICES = 8
ROWS = {"train": 200, "val": 150}  # val pads its last global batch


def _host_share_probe() -> None:
    """In a fresh 8-device XLA:CPU runtime: each host's loaders for 1 host (the single-host path), 2 and 4."""
    import contextlib
    import io

    import torch_xla
    import torch_xla.runtime as xr
    from probes import built_cli, rebuilt_trainer

    from xla_train.cli.main import main
    from xla_train.runtime.plan import plan_hardware

    def pretend(host: int, hosts: int) -> None:
        xr.process_index, xr.process_count = (lambda: host), (lambda: hosts)
        xr.addressable_runtime_device_count = lambda: GLOBAL_DEVICES // hosts

    out, cli = {}, None
    for hosts in (1, 2, 4):
        for host in range(hosts):
            pretend(host, hosts)
            if cli is None:
                cli = built_cli(
                    {
                        "recipe": "quickstart",
                        "accelerator": "xla",
                        "devices": "auto",
                        "data.class_path": "probes.RowsDataModule",
                        "batch_size": str(BATCH),
                    }
                )
            t, dm = rebuilt_trainer(cli), cli.datamodule
            rec = {
                "num_devices": t.num_devices,
                "num_nodes": t.num_nodes,
                "world_size": t.world_size,
                "global_rank": t.global_rank,
                "is_global_zero": t.is_global_zero,
                "share": dm.process_share(),
            }
            for split in ROWS:
                loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
                rec[split] = [[int(r) if int(lab) >= 0 else -1 for r, lab in zip(x[:, 0], y)] for x, y in loader]
            device_loader = t.strategy.process_dataloader(dm.train_dataloader())
            rec["minibatch"] = device_loader._parallel_loader_kwargs["input_sharding"].minibatch
            x, _ = next(iter(device_loader))
            rec["input_spec"] = torch_xla._XLAC._get_xla_sharding_spec(x)
            out[f"{hosts}/{host}"] = rec
    errors = out["errors"] = {}
    for hosts, arg in ((1, "num_nodes=2"), (2, "num_nodes=3"), (2, "devices=2"), (2, "strategy=xla_single")):
        pretend(0, hosts)
        if hosts == 1:  # through the command line, which must hand num_nodes to the plan
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                errors[f"{hosts}/{arg}"] = [
                    main(["recipe=quickstart", "accelerator=xla", "devices=auto", arg]),
                    err.getvalue(),
                ]
            continue
        key, value = arg.split("=")
        try:
            plan_hardware("xla", **{"devices": "auto", key: int(value) if value.isdigit() else value})
        except Exception as e:
            errors[f"{hosts}/{arg}"] = [2, f"xla_train: error: {e}"]
    print(json.dumps(out))


@pytest.fixture(scope="module")
def host_shares(tmp_path_factory) -> dict:
    code = "import test_scaling; test_scaling._host_share_probe()"
    env = cli_env(GLOBAL_DEVICES, PYTHONPATH=path_with_tests())
    return script_json(code, env=env, cwd=tmp_path_factory.mktemp("shares"))


def _global_batches(split: str) -> list[list[int]]:
    """The global batches by definition: one process reading all of them (rows in order, -1 for padding)."""
    from xla_train.data.batching import BatchSampler

    sampler = BatchSampler(ROWS[split], BATCH * GLOBAL_DEVICES, train=split == "train", seed=0)
    return [b.tolist() for b in sampler]


@pytest.mark.parametrize("hosts", [2, 4])
def test_each_pod_host_loads_a_disjoint_slice_and_together_the_global_batch(host_shares, hosts):
    single = host_shares["1/0"]
    assert (single["num_devices"], single["num_nodes"], single["world_size"]) == (GLOBAL_DEVICES, 1, 1)
    assert single["minibatch"] is False  # one host: the batch it loads is the global batch
    local = GLOBAL_DEVICES // hosts
    shares = [host_shares[f"{hosts}/{h}"] for h in range(hosts)]
    for h, s in enumerate(shares):
        assert (s["num_devices"], s["num_nodes"], s["world_size"], s["global_rank"]) == (local, hosts, hosts, h)
        assert s["is_global_zero"] == (h == 0)
        assert s["share"] == [BATCH * local, h, hosts]
        assert s["minibatch"] is True  # each host's rows are its slice of one global tensor
        # the batch spans the global mesh: dimension 0 over all 8 devices
        assert s["input_spec"] == "{devices=[%d,1]%s}" % (GLOBAL_DEVICES, ",".join(map(str, range(8))))
    for split in ROWS:
        expected = _global_batches(split)
        assert single[split] == expected
        for step, batch in enumerate(expected):
            slices = [s[split][step] for s in shares]
            assert all(len(sl) == BATCH * local for sl in slices)  # one shape on every host and every step
            real = [r for sl in slices for r in sl if r >= 0]
            assert len(real) == len(set(real))  # disjoint
            assert sum(slices, []) == batch  # in host order, exactly the global batch
        assert all(len(s[split]) == len(expected) for s in shares)


def test_only_the_first_pod_host_writes_and_every_host_resumes(tmp_path):
    """Two emulated hosts run one real fit (2 XLA:CPU devices each, as 1 device on each of 2 hosts), each
    given its own runs_dir: host 0's fills, host 1's stays empty. Host 1 then tests host 0's best checkpoint
    (test_after_fit), which it finds only through the run folder host 0 broadcast. Then both hosts resume
    from host 0's last.ckpt for a second epoch: host 1 loads the file it did not write, and still writes nothing."""
    runs = {h: tmp_path / f"host{h}" / "runs" for h in (0, 1)}

    def both(*extra: str):
        args = ("--trainer.limit_train_batches=2", "--trainer.limit_test_batches=1", *extra)
        p0, p1 = run_pod(lambda h: runs[h].parent, lambda h: (f"runs_dir={runs[h]}", *args), timeout=120)
        for p in (p0, p1):
            assert p.returncode == 0, p.stderr[-4000:]
        return p0, p1

    def written() -> list[str]:
        return sorted(str(f.relative_to(runs[0])) for f in runs[0].rglob("*") if f.is_file())

    p0, p1 = both("epochs=1", "test_after_fit=true")
    run = "quickstart/version_0"
    files = written()
    assert f"{run}/config.yaml" in files and f"{run}/metrics.csv" in files, files
    assert f"{run}/checkpoints/last.ckpt" in files and any("best-epoch=1.ckpt" in f for f in files), files
    assert list(runs[1].parent.rglob("*")) == []  # no runs folder, no file, no empty folder
    assert f"run folder: {runs[0] / run}  (accelerator xla, 1 device(s) on each of 2 hosts)" in p0.stdout
    assert "held-out test accuracy" in p0.stdout
    assert p1.stdout == ""  # the run report, the epoch lines and the test result are host 0's

    last = runs[0] / run / "checkpoints" / "last.ckpt"
    p0, p1 = both("epochs=2", f"ckpt={last}")
    assert "Epoch 2/2" in p0.stdout and "Epoch 1/2" not in p0.stdout, p0.stdout  # resumed after epoch 1
    import torch

    resumed = torch.load(runs[0] / "quickstart/version_1/checkpoints/last.ckpt", weights_only=True)
    assert (resumed["epoch"], resumed["global_step"]) == (1, 4)  # 2 steps per epoch, 2 epochs in all
    assert list(runs[1].parent.rglob("*")) == [] and p1.stdout == ""


def test_pod_hosts_run_steps_per_execution_as_one_step_at_a_time(tmp_path):
    """Two emulated hosts (1 XLA:CPU device each) train 4 steps on device-resident data with steps_per_execution=4
    (one program, its padding rows each host's own) and with K=1: host 0 writes the same weights both ways."""
    import torch

    def fit(k: int) -> dict:
        args = ("epochs=1", "test_after_fit=false", f"steps_per_execution={k}", "on_device=true")
        procs = run_pod(
            lambda h: tmp_path / f"k{k}" / f"host{h}", lambda h: (*args, "--trainer.limit_train_batches=4"), timeout=180
        )
        for p in procs:
            assert p.returncode == 0, p.stderr[-4000:]
        assert not (tmp_path / f"k{k}" / "host1" / "runs").exists()
        ckpt = tmp_path / f"k{k}" / "host0" / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
        return torch.load(ckpt, weights_only=True)

    one, four = fit(1), fit(4)
    assert one["global_step"] == four["global_step"] == 4
    for k in one["state_dict"]:
        torch.testing.assert_close(four["state_dict"][k], one["state_dict"][k], atol=1e-5, rtol=0, msg=k)


@pytest.fixture
def torchrun_rank(monkeypatch):
    """Sets torchrun's variables for one of 2 nodes x 4 GPUs, with CUDA faked, and undoes it all after."""
    import lightning.fabric.accelerators.cuda as fabric_cuda
    import lightning.pytorch.accelerators.cuda as pl_cuda
    import torch
    from lightning.fabric.utilities.rank_zero import rank_zero_only as fabric_rank_zero_only
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))  # the fast path asks (A100)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(fabric_cuda, "num_cuda_devices", lambda: 4)
    monkeypatch.setattr(pl_cuda, "num_cuda_devices", lambda: 4)
    monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)  # DDP sets it; restore it afterwards
    monkeypatch.setattr(fabric_rank_zero_only, "rank", fabric_rank_zero_only.rank)
    monkeypatch.setenv("PL_GLOBAL_SEED", os.environ.get("PL_GLOBAL_SEED", "0"))

    def rank(r: int) -> None:
        for k, v in {
            "TORCHELASTIC_RUN_ID": "test",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "8",
            "RANK": str(r),
            "LOCAL_RANK": str(r % 4),
            "GROUP_RANK": str(r // 4),
            "LOCAL_WORLD_SIZE": "4",
        }.items():
            monkeypatch.setenv(k, v)

    return rank


def test_two_gpu_nodes_run_lightnings_ddp_with_one_share_per_process(torchrun_rank, tmp_path, monkeypatch):
    from lightning.fabric.plugins.environments import TorchElasticEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    from probes import built_cli, rebuilt_trainer

    monkeypatch.chdir(tmp_path)
    slices = {split: [] for split in ROWS}
    torchrun_rank(0)
    cli = built_cli(
        {
            "recipe": "quickstart",
            "accelerator": "gpu",
            "devices": "4",
            "num_nodes": "2",
            "data.class_path": "probes.RowsDataModule",
            "batch_size": str(BATCH),
        }
    )
    for r in range(8):
        torchrun_rank(r)  # each process of the job builds its Trainer the same way, in its own environment
        t, dm = rebuilt_trainer(cli), cli.datamodule
        assert type(t.strategy) is DDPStrategy and isinstance(t.strategy.cluster_environment, TorchElasticEnvironment)
        assert (t.num_nodes, t.num_devices, t.world_size, t.global_rank) == (2, 4, 8, r)
        assert (t.node_rank, t.local_rank) == (r // 4, r % 4)
        assert dm.process_share() == (BATCH, r, 8)
        for split in ROWS:
            loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
            slices[split].append([b.tolist() for b in loader.sampler])
    assert list(tmp_path.iterdir()) == []  # built, not run
    for split, per_rank in slices.items():
        expected = _global_batches(split)
        assert all(len(s) == len(expected) for s in per_rank)
        for step, batch in enumerate(expected):
            assert all(len(s[step]) == BATCH for s in per_rank)
            assert sum((s[step] for s in per_rank), []) == batch  # 8 disjoint slices of each global batch


@pytest.mark.parametrize(
    "case,message",
    [
        ("1/num_nodes=2", "num_nodes=2 but the XLA runtime has 1 host(s); leave num_nodes unset on XLA"),
        ("2/num_nodes=3", "num_nodes=3 but the XLA runtime has 2 host(s)"),
        (
            "2/devices=2",
            "devices=2 but data parallelism (SPMD) spans every XLA device, and this host has 4 (of 8 on "
            "2 hosts); use devices=auto",
        ),
        ("2/strategy=xla_single", "strategy=xla_single drives one device, not the 8 of 2 hosts"),
    ],
)
def test_bad_pod_settings_are_one_line(host_shares, case, message):
    code, err = host_shares["errors"][case]
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("xla_train: error: ") and message in last and "Traceback" not in err, err


@pytest.mark.parametrize("accelerator", ["gpu", "cpu"])
def test_num_nodes_below_one_is_one_line(torchrun_rank, tmp_path, monkeypatch, capsys, accelerator):
    from xla_train.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["recipe=quickstart", f"accelerator={accelerator}", "num_nodes=0"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last == "xla_train: error: num_nodes=0 must be a whole number of at least 1", err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_torchrun_runs_the_module_as_two_nodes(tmp_path):
    """docs/scaling.md's torchrun command, as two nodes of one CPU process each on this machine (accelerator=cpu,
    gloo): torchrun's `-m xla_train`, Lightning's detection of torchrun, and one writer."""
    port = str(free_port())

    def node(n: int):
        work = tmp_path / f"node{n}"
        work.mkdir()
        env = {k: v for k, v in cli_env(1, PYTHONPATH=path_with_tests()).items() if not k.startswith("PJRT_")}
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=1",
            f"--node-rank={n}",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "-m",
            "xla_train",
            "recipe=quickstart",
            "accelerator=cpu",
            "devices=1",
            "num_nodes=2",
            "epochs=1",
            "model.net.class_path=probes.TinyNet",
            "predict_samples=0",
            f"runs_dir={work / 'runs'}",
            "--trainer.limit_train_batches=3",
            "--trainer.limit_val_batches=2",
            "--trainer.limit_test_batches=2",
        ]
        return run_paced(cmd, 300, cwd=work, env=env), work

    with ThreadPoolExecutor(2) as pool:
        (p0, w0), (p1, w1) = pool.map(node, (0, 1))
    for p in (p0, p1):
        assert p.returncode == 0, p.stderr[-4000:]
    assert (w0 / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert not (w1 / "runs").exists()
    assert "(accelerator cpu, 1 device(s) on each of 2 hosts)" in p0.stdout and "held-out test accuracy" in p0.stdout
    assert "run folder" not in p1.stdout
