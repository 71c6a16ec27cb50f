"""TPU pod slices, the paths only a pod takes: a preemption signal that reaches one host, a data folder all
hosts share. Emulated pod hosts on XLA:CPU (tests/pod_host.py, as in tests/test_scaling.py), and on JAX real processes
(tests/test_jax_pods.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from helpers import POD_STEPS, SCRIPTS, cli_env, pod_fit, run_paced
from xla_train.training.resume import PREEMPTED_EXIT_CODE


def _last(work, version: int) -> dict:
    """Host 0's last checkpoint of its run version_N (pod_fit: each host has its own runs_dir, host 1's empty)."""
    return torch.load(
        work / "host0" / "runs/quickstart" / f"version_{version}/checkpoints/last.ckpt", weights_only=True
    )


@pytest.mark.runtime_marks(torch_xla=pytest.mark.slow)  # three 2-host fits: about a minute of CPU on torch_xla
def test_sigterm_on_one_pod_host_stops_every_host_after_the_same_step_and_resumes_exactly(tmp_path, runtime):
    """SIGTERM reaches host 1 alone, after step 2. The hosts agree (over torch_xla's store, or JAX's collectives) to
    stop after one same step, both save there and exit 75; resuming from that checkpoint on both ends with the weights
    of the run that was never stopped. On torch_xla the hosts are emulated (tests/pod_host.py); on JAX they are two
    real processes of 4 CPU devices (tests/test_jax_pods.py)."""
    import json

    streamed = "on_device=false"  # each host's slice of each global batch from the host (test_jax_pods.py: resident)
    whole = pod_fit(tmp_path / "whole", streamed, runtime=runtime)
    for p in whole:
        assert p.returncode == 0, p.stderr[-4000:]

    work = tmp_path / "stopped"
    kill = (
        "--trainer.callbacks+=killer.KillAt",
        "--trainer.callbacks.init_args.step=2",
        "--trainer.callbacks.init_args.sig=SIGTERM",
    )
    stopped = pod_fit(work, streamed, host1=kill, runtime=runtime)
    for p in stopped:
        assert p.returncode == PREEMPTED_EXIT_CODE, p.stderr[-4000:]
    steps = [json.loads((work / f"host{h}" / "stop.json").read_text()) for h in (0, 1)]
    assert steps[0] == steps[1] and steps[0]["exception"] == "SIGTERMException", steps
    at = steps[0]["step"]
    assert 2 <= at < POD_STEPS  # after the signal's step, before the epoch's end
    assert _last(work, 0)["global_step"] == at  # host 0 wrote what both hosts saved
    assert f"stopped by signal after step {at}" in stopped[0].stderr

    last = work / "host0" / "runs/quickstart/version_0/checkpoints/last.ckpt"
    resumed = pod_fit(work, streamed, f"ckpt={last}", runtime=runtime)  # host 1 reads the file host 0 wrote
    for p in resumed:
        assert p.returncode == 0, p.stderr[-4000:]
    a, b = _last(tmp_path / "whole", 0), _last(work, 1)
    assert a["global_step"] == b["global_step"] == POD_STEPS
    for k in a["state_dict"]:
        torch.testing.assert_close(b["state_dict"][k], a["state_dict"][k], atol=1e-5, rtol=0, msg=k)
    assert sorted(p.name for p in (work / "host1").iterdir()) == ["stop.json"]  # host 1 wrote nothing else


def test_hosts_sharing_a_data_dir_download_once_while_the_others_wait(tmp_path):
    """Two processes (two hosts on one shared file system) load IMDB with download=true into one empty
    folder, from an HTTP server on 127.0.0.1 that holds its first answer until the second process is either
    waiting for the lock or asking the server too. Fetched once; both read the same complete data set."""
    import hashlib
    import http.server
    import io
    import tarfile
    import threading

    from test_imdb import write_aclimdb

    src = tmp_path / "src"
    write_aclimdb(src, per_class=4)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(src / "aclImdb", arcname="aclImdb")
    archive = buf.getvalue()
    gets, release, second = [], threading.Event(), threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            gets.append(self.path)
            if len(gets) > 1:
                second.set()
            release.wait(60)
            self.send_response(200)
            self.send_header("Content-Length", str(len(archive)))
            self.end_headers()
            self.wfile.write(archive)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/aclImdb_v1.tar.gz"
    shared = tmp_path / "shared"
    cmd = [sys.executable, str(SCRIPTS / "pods_load_imdb.py"), str(shared), url, hashlib.md5(archive).hexdigest()]
    env = cli_env(1)
    try:
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(600):  # the first process is downloading (its request is held) ...
            if gets:
                break
            threading.Event().wait(0.1)
        assert gets, "the first process never asked the server"
        later = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waited = []

        def watch():
            for line in later.stderr:
                waited.append(line)
                if "waiting for another process's download of IMDB" in line:
                    release.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        second.wait(60)  # ... until the second one waits for it (the fix) or downloads too (the race)
        release.set()
        out = [p.communicate(timeout=120)[0] for p in (first, later)]
        watcher.join(10)
    finally:
        release.set()
        server.shutdown()
    assert first.returncode == 0 and later.returncode == 0, (first.stderr.read(), "".join(waited))
    assert any("waiting for another process's download of IMDB" in line for line in waited), waited
    assert len(gets) == 2, gets  # torchvision asks twice (a redirect probe, then the file), and only once over
    last = [o.strip().splitlines()[-1] for o in out]
    assert last[0] == last[1] and last[0].startswith("9 8 "), out  # the fixture's reviews, one vocabulary
    assert sorted(p.name for p in shared.iterdir() if not p.name.startswith(".xla_train")) == ["aclImdb"]


def test_a_pod_checkpoint_refuses_state_split_over_devices():
    """Host 0 writes what `.cpu()` reads on it: whole for replicated tensors (as torch_xla's own distributed
    checkpoint reads them), not for split ones, which the save refuses by name (4 XLA:CPU devices, SPMD)."""
    proc = run_paced([sys.executable, str(SCRIPTS / "pods_sharded.py")], 120, env=cli_env(4))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-2].startswith("the checkpoint holds tensors split over the XLA devices (state_dict.s)"), lines
    assert lines[-1] == "True"
