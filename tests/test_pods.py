"""TPU pod slices, the paths only a pod takes: a preemption signal that reaches one host, a data folder all
hosts share. Emulated pod hosts on XLA:CPU (tests/pod_host.py, as in tests/test_scaling.py)."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import TESTS, cli_env
from test_scaling import _free_port
from xla_train.training.resume import PREEMPTED_EXIT_CODE

STEPS = 6


def _pod(work, *extra: str, host1: tuple[str, ...] = (), timeout: int = 150):
    """Two emulated hosts (1 XLA:CPU device each) run one fit; `host1` are arguments for host 1 alone."""
    port = str(_free_port())

    def host(h: int):
        d = work / f"host{h}"
        d.mkdir(parents=True, exist_ok=True)
        env = cli_env(2, FAKE_HOST=str(h), FAKE_HOSTS="2", FAKE_LOCAL="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=port)
        args = ["recipe=quickstart", "model.net.class_path=probes.TinyNet", "predict_samples=0", "epochs=1",
                "test_after_fit=false", f"runs_dir={work / 'runs'}", f"--trainer.limit_train_batches={STEPS}",
                "--trainer.limit_val_batches=1", "--trainer.num_sanity_val_steps=0",
                "--trainer.callbacks+=probes.StopRecord", f"--trainer.callbacks.init_args.out={d / 'stop.json'}",
                *extra, *(host1 if h == 1 else ())]
        return subprocess.run([sys.executable, str(TESTS / "pod_host.py"), *args], cwd=d, env=env,
                              capture_output=True, text=True, timeout=timeout)

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(host, (0, 1)))


def _last(work, version: int) -> dict:
    return torch.load(work / "runs" / "quickstart" / f"version_{version}" / "checkpoints" / "last.ckpt",
                      weights_only=True)


@pytest.mark.slow  # three 2-host fits: about a minute of CPU, three on this shared machine
def test_sigterm_on_one_pod_host_stops_every_host_after_the_same_step_and_resumes_exactly(tmp_path):
    """SIGTERM reaches host 1 alone, after step 2. The hosts agree over their store (no device work) to stop
    after one same step, both save there and exit 75; resuming from that checkpoint ends with the weights of
    the run that was never stopped."""
    import json

    whole = _pod(tmp_path / "whole")
    for p in whole:
        assert p.returncode == 0, p.stderr[-4000:]

    work = tmp_path / "stopped"
    kill = ("--trainer.callbacks+=killer.KillAt", "--trainer.callbacks.init_args.step=2",
            "--trainer.callbacks.init_args.sig=SIGTERM")
    stopped = _pod(work, host1=kill)
    for p in stopped:
        assert p.returncode == PREEMPTED_EXIT_CODE, p.stderr[-4000:]
    steps = [json.loads((work / f"host{h}" / "stop.json").read_text()) for h in (0, 1)]
    assert steps[0] == steps[1] and steps[0]["exception"] == "SIGTERMException", steps
    at = steps[0]["step"]
    assert 2 <= at < STEPS  # after the signal's step, before the epoch's end
    assert _last(work, 0)["global_step"] == at  # host 0 wrote what both hosts saved
    assert f"stopped by signal after step {at}" in stopped[0].stderr

    resumed = _pod(work, f"ckpt={work / 'runs/quickstart/version_0/checkpoints/last.ckpt'}")
    for p in resumed:
        assert p.returncode == 0, p.stderr[-4000:]
    a, b = _last(tmp_path / "whole", 0), _last(work, 1)
    assert a["global_step"] == b["global_step"] == STEPS
    for k in a["state_dict"]:
        torch.testing.assert_close(b["state_dict"][k], a["state_dict"][k], atol=1e-5, rtol=0, msg=k)

