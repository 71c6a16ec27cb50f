"""precision=bf16 on XLA: autocast in the steps, float32 weights and checkpoints; compile_cache on XLA:CPU."""

import json
import logging

import pytest
import torch

from helpers import run_cli, runtime_key


# Whether a compile_cache= folder is kept on XLA:CPU: torch_xla's persistent cache is for a TPU and says it has no
# effect here; JAX's keeps the CPU's programs too (test_jax_runtime.py reads them back)
CACHE_ON_CPU = {"torch_xla": False, "jax": True}


def test_bf16_on_xla_autocasts_and_saves_float32(tmp_path, runtime):
    """precision=bf16 on either runtime: the training step, traced once, computes the last layer in bf16 from float32
    weights (torch_xla under torch.autocast, JAX through torchax's casts), and the checkpoint holds float32."""
    out = tmp_path / "seen.json"
    proc = run_cli(
        "fit",
        "recipe=quickstart",
        "model.net.class_path=probes.TinyNet",
        "accelerator=xla",
        runtime_key(runtime),
        "precision=bf16",
        "epochs=1",
        f"compile_cache={tmp_path / 'cache'}",
        "trainer.limit_train_batches=3",
        "test_after_fit=false",
        "predict_samples=0",
        "--trainer.callbacks+=probes.AutocastProbe",
        f"--trainer.callbacks.init_args.out={out}",
        cwd=tmp_path,
    )
    seen = json.loads(out.read_text())
    assert len(seen) == 1  # auto traces the training step once; each of the 3 steps runs its program
    assert all(s["out"] == "torch.bfloat16" and s["weight"] == "torch.float32" for s in seen), seen
    ckpt = torch.load(next(tmp_path.glob("runs/quickstart/version_0/checkpoints/last.ckpt")), weights_only=True)
    assert {v.dtype for v in ckpt["state_dict"].values() if v.is_floating_point()} == {torch.float32}
    assert "XLA_USE_BF16" not in proc.stderr
    kept = CACHE_ON_CPU[runtime]
    assert (tmp_path / "cache").exists() == kept and proc.stderr.count("has no effect on XLA:CPU") == (not kept)


def test_bf16_true_on_xla_is_refused_with_the_alternative(tmp_path, monkeypatch, capsys, runtime):
    from xla_train.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert main(["recipe=quickstart", "accelerator=xla", runtime_key(runtime), "precision=bf16-true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xla_train: error: ") and err.count("\n") == 1 and "bf16-true" in err, err
    assert "precision=bf16" in err.rsplit("use ", 1)[-1], err  # the alternative named


@pytest.mark.fresh_xla(devices=1)
def test_matmul_precision_is_set_before_the_first_trace_and_a_change_after_it_is_refused(caplog):
    """torch_xla's float32 matmul precision is process wide and read as graphs are lowered (a TPU: one bf16 pass
    at default): set once, before any graph; a later change would mix precisions in one process."""
    import torch_xla
    import torch_xla.backends as backends

    from xla_train.errors import ConfigError
    from xla_train.runtime.plan import plan_hardware

    with caplog.at_level(logging.WARNING):
        plan_hardware("xla", 1, matmul_precision="high")
    assert backends.get_mat_mul_precision() == "high"
    assert "multiple times is not recommended" not in caplog.text  # torch_xla's warning: not for the first setting
    x = torch.ones(8, 8, device=torch_xla.device())
    (x @ x).sum().item()  # a graph has run
    plan_hardware("xla", 1, matmul_precision="high")  # the same again: fine
    with pytest.raises(ConfigError, match="matmul_precision=highest: this process has already run XLA graphs at high"):
        plan_hardware("xla", 1, matmul_precision="highest")
    assert backends.get_mat_mul_precision() == "high"
