"""steps_per_execution=K: K training steps traced once and run as one XLA program train exactly as K steps.

Each comparison runs the real command twice, K=1 and K=8, with the same seed,
and compares the final weights and every epoch metric. Steps that run in
different programs are fused differently by XLA, so float results may differ in
the last bits; Adam turns such differences in a near-zero gradient into
differences of up to a fraction of the learning rate, which is why the batches
here are not the smallest possible (docs/feeding.md). A skipped,
repeated or reordered batch, a wrong learning rate or a wrong dropout seed moves
the weights by about 1e-3.
"""

import csv
import math

import pytest
import torch

from helpers import SCRIPTS, run_cli, run_paced, runtime_key, write_cifar10
from test_imdb import write_aclimdb
from xla_train.training.resume import PREEMPTED_EXIT_CODE

# 200 fixture images at batch 16: 12 steps an epoch (a group of 8, then 4); max_steps=16 stops 4 steps into epoch 2.
# val_fraction=0 (validation on the test split) keeps every training image, and these step counts, in training.
NO_HOLDOUT = "val_fraction=0"
CNN = (
    "recipe=cifar10",
    "accelerator=xla",
    "epochs=2",
    "batch_size=16",
    "trainer.max_steps=16",
    "trainer.limit_val_batches=2",
    "download=false",
    "test_after_fit=false",
    NO_HOLDOUT,
)
METRICS = ("train_loss", "train_acc", "val_loss", "val_acc")


def fit(work, *args, devices=1, check=True):
    work.mkdir(exist_ok=True)
    return run_cli("fit", *args, cwd=work, devices=devices, check=check)


def last_checkpoint(work) -> dict:
    return torch.load(sorted(work.glob("runs/*/version_*/checkpoints/last.ckpt"))[-1], weights_only=True)


def epochs(work) -> dict[int, dict[str, float]]:
    path = sorted(work.glob("runs/*/version_*/metrics.csv"))[-1]
    out: dict[int, dict[str, float]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            out.setdefault(int(row["epoch"]), {}).update(
                {k: float(v) for k, v in row.items() if v and k not in ("epoch", "step")}
            )
    return out


def assert_same_training(a, b, tol=1e-5, first_epoch=0, steps=16, stray=0.0, bound=0.0, metric_tol=1e-5):
    """Same step count, weights and optimizer state; the same metrics for every epoch from `first_epoch` (a
    resumed run's interrupted epoch reports only the steps after the resume). `stray`: the share of the weights'
    (and of the optimizer state's) elements that may lie beyond `tol`, none of them further than `bound`."""
    ca, cb = last_checkpoint(a), last_checkpoint(b)
    assert ca["global_step"] == cb["global_step"] == steps
    sa, sb = ca["optimizer_states"][0]["state"], cb["optimizer_states"][0]["state"]
    assert sa.keys() == sb.keys() and all(sa[i].keys() == sb[i].keys() for i in sa)
    weights = [(k, ca["state_dict"][k], cb["state_dict"][k], 0) for k in ca["state_dict"]]
    moments = [(f"{i}.{k}", sa[i][k], sb[i][k], 1e-4) for i in sa for k in sa[i]]  # torch.optim's own state
    for pairs in (weights, moments):
        if not stray:
            for name, x, y, rtol in pairs:
                torch.testing.assert_close(x, y, atol=tol, rtol=rtol, msg=name)
            continue
        off, total, worst = 0, 0, 0.0
        for _, x, y, rtol in pairs:
            gap = (x.double() - y.double()).abs()
            off += int((gap > tol + rtol * y.double().abs()).sum())
            total, worst = total + x.numel(), max(worst, float(gap.max()) if gap.numel() else 0.0)
        assert off <= stray * total and worst <= bound, (pairs[0][0], off, total, worst)
    ea, eb = epochs(a), epochs(b)
    assert ea.keys() == eb.keys() and len(ea) >= 2
    for e in [e for e in ea if e >= first_epoch]:
        for k in METRICS:
            if k in ea[e] or k in eb[e]:
                assert abs(ea[e][k] - eb[e][k]) < metric_tol, (e, k, ea[e][k], eb[e][k])


@pytest.fixture(scope="module")
def cnn_runs(cifar_root, tmp_path_factory):
    """K=1 and K=8 (unrolled) on device-resident data (on_device=auto on XLA), and K=1 streamed from the host."""
    work = tmp_path_factory.mktemp("spe")
    settings = {
        1: ["steps_per_execution=1"],
        8: ["steps_per_execution=8"],
        "streamed": ["on_device=false", "steps_per_execution=1"],
    }  # streamed one step at a time as Lightning runs it, as the K=1 it is compared with
    procs = {k: fit(work / f"k{k}", *CNN, f"data_dir={cifar_root}", *args) for k, args in settings.items()}
    return {k: work / f"k{k}" for k in procs}, procs


def test_device_resident_data_trains_exactly_as_streamed_batches(cnn_runs):
    """The same batch indices per step (one sampler), gathered and normalised on the device instead of sent: the
    same weights, optimizer state and metrics after 16 steps (measured equal to the bit on XLA:CPU)."""
    runs, procs = cnn_runs
    assert "data: on the device (" in procs[1].stdout
    assert "data: streamed from the host as stored (on_device=false)" in procs["streamed"].stdout
    assert_same_training(runs["streamed"], runs[1], tol=1e-6)


def test_eight_steps_per_execution_train_as_one_at_a_time_cnn(cnn_runs):
    """Adam and dropout; 12 steps an epoch, so groups of 8 and 4 alternate. Lightning still counts single steps.

    The losses agree to 1e-5 (1e-4 allowed: 3e-5 on a CPU without AVX-512), so the steps and their dropout masks
    are the same; the weights and Adam's state to
    1e-4, but for a few elements. The two programs fuse differently, and Adam answers a near-zero gradient's last
    bits with up to a whole learning-rate step (1e-3). On CPUs with AVX-512 every weight stayed within 1e-4; on an
    AMD EPYC without it 23 of 1,676,984 weights (1.4e-5 of them) and a few hundred of Adam's moments (of millions)
    were further apart, at most 1.6e-3. So: at most 0.1% of the elements beyond 1e-4, none beyond 5e-3."""
    runs, procs = cnn_runs
    assert_same_training(runs[1], runs[8], tol=1e-4, stray=1e-3, bound=5e-3, metric_tol=1e-4)
    assert "12/12 - " in procs[8].stdout and "ms/step (host " in procs[8].stdout


# A net that compiles in about a second (BatchNorm in training, a linear layer) under the ResNet recipe's optimizer:
# SGD with Nesterov momentum 0.9 and weight decay, on a cosine schedule whose rate changes every step. 12 steps an
# epoch (one device at batch 16 on 200 images, or 8 devices at batch 8 on 800) and max_steps=18: at K=4, epoch 1 runs three full groups and the
# first remainder (2 steps) comes only in epoch 2, so a remainder that needed its own program would compile there.
TINY = (
    "recipe=cifar10_resnet",
    "model.net.class_path=probes.TinyNet",
    "accelerator=xla",
    "epochs=2",
    "trainer.max_steps=18",
    "trainer.limit_val_batches=1",
    "download=false",
    "test_after_fit=false",
    NO_HOLDOUT,
)
TINY_RUNS = {
    "k1": ["steps_per_execution=1", "--trainer.callbacks+=probes.NetCalls"],
    "auto": ["--trainer.callbacks+=probes.NetCalls"],  # the default: TinyNet has no convolution, so a While loop
    "unroll": ["steps_per_execution=4", "execution_loop=unroll"],
    "while": ["steps_per_execution=4", "execution_loop=while"],
}


EXTRA_RUNS = {
    # Adam (the CNN recipes' optimizer) and dropout (its seeds per step) in the While loop too
    **{
        f"adam_{name}": [*TINY_RUNS[name], "model.optimizer=adam", "lr=0.01", "model.net.init_args.dropout=0.25"]
        for name in ("k1", "while")  # what test_adam_and_dropout_in_the_while_loop_... compares
    },
    # a conv net's path on XLA:CPU (auto's K against the run's length, unrolled), with TinyNet's quick compile
    "auto_unroll": ["execution_loop=unroll", "--trainer.callbacks+=probes.NetCalls"],
    # the losses a callback reads on JAX, against Lightning's own step on torch_xla: the two runtimes draw other
    # random crops, so neither augments
    "k1_plain": ["steps_per_execution=1", "augment=false"],
    "unroll_plain": ["augment=false", *TINY_RUNS["unroll"]],
}


class TinyRuns:
    """One runtime's TINY runs on 1 or 8 devices, each made the first time a test reads it, so that a runtime runs
    only what its tests compare: `runs, procs = tiny_runs` gives their folders and processes by name."""

    def __init__(self, work, runtime: str, devices: int, data, batch: int) -> None:
        self.work, self.runtime, self.devices, self.made = work, runtime, devices, {}
        losses = ("--trainer.callbacks+=probes.LossRecord", "--trainer.callbacks.init_args.out=losses.json")
        self.common = (*TINY, runtime_key(runtime), f"batch_size={batch}", f"data_dir={data}", *losses)
        # under SPMD, every state tensor's sharding after the K program (issue: a partitioner may shard outputs)
        self.probes = ("--trainer.callbacks+=probes.ShardingProbe",) if devices > 1 and runtime == "torch_xla" else ()

    def __getitem__(self, name: str):
        if name not in self.made:
            args = {**TINY_RUNS, **EXTRA_RUNS}[name]
            work = self.work / name
            self.made[name] = work, fit(work, *self.common, *args, *self.probes, devices=self.devices)
        return self.made[name]

    def __iter__(self):
        return iter((_Made(self, 0), _Made(self, 1)))


class _Made(dict):
    def __init__(self, runs: TinyRuns, part: int) -> None:
        super().__init__()
        self.runs, self.part = runs, part

    def __missing__(self, name: str):
        return self.runs[name][self.part]


@pytest.fixture(scope="module")
def tiny_made(cifar_root, tmp_path_factory):
    """(runtime, devices) -> its TinyRuns: one device at batch 16 on the fixture's 200 images, or 8 devices at batch
    8 on 800, 12 steps an epoch either way."""
    made: dict = {}

    def runs(runtime: str, devices: int) -> TinyRuns:
        if (runtime, devices) not in made:
            work = tmp_path_factory.mktemp(f"tiny_{runtime}_{devices}")
            data, batch = (cifar_root, 16) if devices == 1 else (write_cifar10(work / "data", per_batch=160), 8)
            made[runtime, devices] = TinyRuns(work, runtime, devices, data, batch)
        return made[runtime, devices]

    return runs


@pytest.fixture(params=[1, 8], ids=["one_device", "spmd_8"])
def tiny_runs(request, runtime, tiny_made) -> TinyRuns:
    return tiny_made(runtime, request.param)


# The net's forward calls in training batches at K=1: torch_xla's K=1 is Lightning's own step, traced anew at every
# step; JAX's is a program of one step, traced once.
K1_NET_CALLS = {"torch_xla": 18, "jax": 1}


@pytest.mark.parametrize("loop", ["unroll", "while"])
def test_sgd_nesterov_on_a_cosine_schedule_trains_as_one_step_at_a_time(tiny_runs, loop):
    """K=4 against K=1, unrolled and as a While loop, on one device and under SPMD on 8: the same weights,
    momentum buffers, BatchNorm statistics and epoch metrics after 18 steps; XLA ran about steps/K programs an
    epoch (a run that ignored steps_per_execution would run 12), and the remainder compiled nothing."""
    runs, procs = tiny_runs
    assert (
        f"steps per execution: 4, as an XLA {'While loop' if loop == 'while' else 'unrolled program'}"
        in procs[loop].stdout
    )
    assert_same_training(runs["k1"], runs[loop], steps=18)
    one, grouped = epochs(runs["k1"]), epochs(runs[loop])
    assert one[0]["xla_executions"] >= 12, one  # one program a step, at least (the counter counts)
    assert (grouped[0]["xla_executions"], grouped[1]["xla_executions"]) == (3, 2), grouped  # 4+4+4, then 4+2
    assert grouped[1]["xla_compiles"] == 0, grouped


def test_auto_runs_a_net_without_a_convolution_as_a_while_loop_traced_once(tiny_runs, runtime):
    """steps_per_execution=auto and execution_loop=auto on XLA:CPU for a net without a convolution (TinyNet: BatchNorm,
    pooling, a linear layer): its steps run as a While loop, K=32 shrunk to the epoch's 12 steps, and the report
    says why. The step is traced once and run by every later step, where Lightning's own step
    (steps_per_execution=1 set) traces the net anew at every step. It trains as that step does, on one device and
    under SPMD on 8, one execution an epoch, and compiles nothing after its first (the last epoch's 6 steps run the
    same program: the loop's trip count is data)."""
    import json

    runs, procs = tiny_runs
    chose = "steps per execution: 12 (auto: the steps of an epoch), as an XLA While loop (execution_loop=while; "
    assert chose + "auto: no convolution in the net, which XLA:CPU compiles and runs faster as a loop)" in (
        procs["auto"].stdout
    ), procs["auto"].stdout[-3000:]
    assert_same_training(runs["k1"], runs["auto"], steps=18)
    calls = {n: json.loads(next(runs[n].glob("runs/*/version_0/net_calls.json")).read_text()) for n in ("k1", "auto")}
    assert calls == {"k1": {"train": K1_NET_CALLS[runtime]}, "auto": {"train": 1}}, calls
    auto = epochs(runs["auto"])
    assert (auto[0]["xla_executions"], auto[1]["xla_executions"], auto[1]["xla_compiles"]) == (1, 1, 0), auto


@pytest.mark.parametrize("tiny_runs", [1], indirect=True, ids=["one_device"])
def test_auto_on_unrolled_steps_runs_every_step_through_the_program_its_first_step_traced(tiny_runs, runtime):
    """steps_per_execution=auto where the steps unroll (a conv net on XLA:CPU; execution_loop=unroll here), for a run
    too short to repay K=8's compile: one step a program, traced once and run by every later step, where
    Lightning's own step (steps_per_execution=1 set) traces the net anew at every step. It trains as that step
    does and compiles nothing after its first step."""
    import json

    runs, procs = tiny_runs
    chose = "steps per execution: 1 (auto: 18 training steps < 1,000, too few to pay back the longer compile of 8 "
    assert chose + "unrolled steps; one step a program, traced once)" in procs["auto_unroll"].stdout
    assert_same_training(runs["k1"], runs["auto_unroll"], steps=18)
    names = ("k1", "auto_unroll")
    calls = {n: json.loads(next(runs[n].glob("runs/*/version_0/net_calls.json")).read_text()) for n in names}
    assert calls == {"k1": {"train": K1_NET_CALLS[runtime]}, "auto_unroll": {"train": 1}}, calls
    auto = epochs(runs["auto_unroll"])
    assert auto[0]["xla_executions"] >= 12 and auto[1]["xla_compiles"] == 0, auto


def test_under_spmd_the_k_program_leaves_the_state_replicated_and_the_batch_split(tiny_made):
    """After K steps as one program on 8 devices: every parameter, BatchNorm buffer and momentum buffer whole on
    every device (what a checkpoint's .cpu() on each host needs), and the batch split over the devices. The
    program marks its outputs replicated itself, so the partitioner's propagation decides nothing. The data is on
    the device: a step sends only its number (replicated), and each device holds its rows of the epoch's order."""
    import json

    runs, _ = tiny_made("torch_xla", 8)  # torch_xla's shardings, as it reports them
    for name in TINY_RUNS:
        found = json.loads(next(runs[name].glob("runs/*/version_0/shardings.json")).read_text())
        assert found["batch"] == ["REPLICATED"] and found["rows"] == ["TILED"], (name, found)
        assert len(found["state"]) >= 6 and set(found["state"].values()) <= {"REPLICATED"}, (name, found["state"])


@pytest.mark.parametrize("tiny_runs", [1], indirect=True, ids=["one_device"])  # Adam under SPMD: test_spmd.py
def test_adam_and_dropout_in_the_while_loop_train_as_one_step_at_a_time(tiny_runs):
    """Each step in the While body draws its dropout mask from the seed it would have had one step at a time: a
    wrong seed moves the weights by far more than 1e-5 here."""
    runs, _ = tiny_runs
    assert last_checkpoint(runs["adam_while"])["xla_train"]["init_args"]["dropout"] == 0.25
    assert_same_training(runs["adam_k1"], runs["adam_while"], steps=18)


LOSS_RUNS = {  # a grouped run, and the K=1 run it is held to: (runtime, run) each
    "torch_xla_unroll": (("torch_xla", "unroll"), ("torch_xla", "k1")),
    "torch_xla_while": (("torch_xla", "while"), ("torch_xla", "k1")),
    "jax_unroll": (("jax", "unroll_plain"), ("torch_xla", "k1_plain")),
}


@pytest.mark.parametrize("run", LOSS_RUNS)
def test_a_callback_reads_each_groups_last_loss_and_no_number_before_it(tiny_made, run):
    """A user's callback reading outputs["loss"] in on_train_batch_end, K=4: at the step that ends a group (the
    fourth, eighth and twelfth of epoch 1; then 16, and 18 where max_steps cuts a group of two) that step's own
    loss, as Lightning's K=1 step gives it; before it, a tensor with no element, not a NaN that looked like a
    diverged run."""
    import json

    grouped, one = (
        json.loads((tiny_made(runtime, 1)[name][0] / "losses.json").read_text()) for runtime, name in LOSS_RUNS[run]
    )
    ends = [4, 8, 12, 16, 18]
    assert len(one) == len(grouped) == 18 and all(math.isfinite(v) for v in one), (one, grouped)
    assert [i + 1 for i, v in enumerate(grouped) if v is not None] == ends, grouped
    # another step's loss is 10% or more away; JAX against torch_xla drifts by up to 3e-5 over 18 steps at lr=0.1
    assert [grouped[i - 1] for i in ends] == pytest.approx([one[i - 1] for i in ends], rel=1e-4)


@pytest.mark.parametrize("tiny_runs", [1], indirect=True, ids=["one_device"])
@pytest.mark.parametrize("run", ["k1", "while"])
def test_an_epoch_that_max_steps_ends_early_prints_its_own_steps_and_metrics(tiny_runs, run):
    """max_steps=18 ends epoch 2 after 6 of its 12 steps, in a run never resumed: its line says 6/12, not
    "12/12 (6 after resume)", and shows the loss and accuracy of those 6 steps as metrics.csv logs them, not epoch 1's
    still on display (the module logged them after the line was printed), one step at a time or in groups. Epoch 2 never validated: its line shows no validation figures, and the best checkpoint's
    report does not call it a tie on epoch 1's scores."""
    runs, procs = tiny_runs
    out = procs[run].stdout
    lines = [ln for ln in out.splitlines() if ln.startswith(("6/12", "12/12"))]
    assert len(lines) == 2 and lines[1].startswith("6/12 - ") and "val_" not in lines[1], lines
    assert "val_loss: " in lines[0] and "best checkpoint: epoch 1 " in out and "tied" not in out, out[-1500:]
    logged = epochs(runs[run])
    assert logged[1]["train_loss"] != logged[0]["train_loss"]
    for e, line in enumerate(lines):
        loss, acc = (float(line.split(f" - {k}: ")[1].split()[0]) for k in ("loss", "acc"))
        assert (loss, acc) == pytest.approx((logged[e]["train_loss"], logged[e]["train_acc"]), abs=1e-4), (e, line)


def lstm_fit(data, *size: str) -> tuple[str, ...]:
    """The LSTM on XLA for 16 steps of 8 reviews over two epochs (81 training reviews: 10 steps an epoch)."""
    fixed = "recipe=imdb accelerator=xla lr=0.01 download=false batch_size=8 epochs=2 trainer.max_steps=16"
    return (
        *fixed.split(),
        *size,
        "test_after_fit=false",
        "trainer.limit_val_batches=1",
        f"data_dir={data}",
        NO_HOLDOUT,
    )


def test_the_lstm_scan_inside_the_while_loop_trains_as_one_step_at_a_time(tmp_path):
    """The scan LSTM is itself an XLA While loop: here it runs inside the K-step one, with a remainder."""
    data = write_aclimdb(tmp_path / "data", per_class=40)  # 81 training reviews: 10 steps of 8 an epoch
    args = lstm_fit(data, "maxlen=16", "model.net.embed_dim=8", "model.net.hidden_size=8")
    fit(tmp_path / "k1", *args, "steps_per_execution=1")
    fit(tmp_path / "while", *args, "steps_per_execution=4", "execution_loop=while")
    assert_same_training(tmp_path / "k1", tmp_path / "while")
    assert [e["xla_executions"] for e in epochs(tmp_path / "while").values()] == [3, 2]  # 4+4+2, then 4+2


def test_auto_steps_per_execution_groups_a_while_loop_and_fits_the_epoch(cifar_root, tmp_path):
    """steps_per_execution=auto (the default) with the While loop takes 32 steps, cut to an epoch's 12 here; where
    steps cannot be grouped (accumulate_grad_batches) it runs one step at a time instead of refusing, and says why."""
    grouped = fit(
        tmp_path / "while",
        *TINY,
        "batch_size=16",
        f"data_dir={cifar_root}",
        "execution_loop=while",
        "matmul_precision=highest",
    )
    assert "steps per execution: 12 (auto: the steps of an epoch), as an XLA While loop" in grouped.stdout
    assert (
        "matmul precision: highest (six bf16 passes on a TPU, about float32; XLA:CPU computes float32)"
        in grouped.stdout.splitlines()[:4]
    )  # among the report's first lines
    assert [e["xla_executions"] for e in epochs(tmp_path / "while").values()] == [1, 1]  # 12, then 6
    # unrolled, auto's one step a program: test_auto_on_unrolled_steps_runs_every_step_through_the_program_its_...
    accumulating = fit(
        tmp_path / "accumulate",
        *TINY,
        "batch_size=16",
        f"data_dir={cifar_root}",
        "execution_loop=while",
        "trainer.accumulate_grad_batches=2",
    )  # K>1 would refuse this
    assert (
        "steps per execution: 1 (auto: steps_per_execution>1 cannot be combined with accumulate_grad_batches"
        in accumulating.stdout
    )


@pytest.mark.slow  # default-suite time; SIGTERM in a group stays in the default suite
def test_resume_mid_group_ends_at_the_uninterrupted_weights(cnn_runs, cifar_root, tmp_path):
    """A checkpoint every 5 steps falls inside a group of 8: the kept steps run first, so it holds step 10
    exactly; killed at step 11, the run resumes there and ends where the uninterrupted K=8 run ended."""
    runs, _ = cnn_runs
    args = (*CNN, f"data_dir={cifar_root}", "steps_per_execution=8", "checkpoint_every=5")
    killed = fit(
        tmp_path, *args, "--trainer.callbacks+=killer.KillAt", "--trainer.callbacks.init_args.step=11", check=False
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert last_checkpoint(tmp_path)["global_step"] == 10
    fit(tmp_path, *args, "ckpt=last")
    assert_same_training(runs[8], tmp_path, first_epoch=1)


def test_a_sigterm_inside_a_group_saves_every_counted_step(cifar_root, tmp_path):
    """SIGTERM at step 3 of a group of 8: the checkpoint holds the weights and Adam's moments of a K=1 run stopped
    the same way. With the flushes before the checkpoint removed, the weights here are step 0's (checked). The
    flush in lightning_module_state_dict alone is covered by the optimizer-state flush that follows it: the state
    dict holds the parameters themselves, which that flush updates in place before the file is written."""
    args = (
        *TINY,
        "batch_size=16",
        f"data_dir={cifar_root}",
        "model.optimizer=adam",
        "lr=0.01",
        "--trainer.callbacks+=killer.KillAt",
        "--trainer.callbacks.init_args.step=3",
        "--trainer.callbacks.init_args.sig=SIGTERM",
    )
    for k in (8, 1):
        stopped = fit(tmp_path / f"k{k}", *args, f"steps_per_execution={k}", check=False)
        assert stopped.returncode == PREEMPTED_EXIT_CODE, stopped.stderr[-2000:]
    a, b = last_checkpoint(tmp_path / "k1"), last_checkpoint(tmp_path / "k8")
    assert a["global_step"] == b["global_step"] == 3
    for k in a["state_dict"]:
        torch.testing.assert_close(b["state_dict"][k], a["state_dict"][k], atol=1e-5, rtol=0, msg=k)
    sa, sb = a["optimizer_states"][0]["state"], b["optimizer_states"][0]["state"]
    for i in sa:
        assert int(sb[i]["step"]) == 3
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sb[i][k], sa[i][k], atol=1e-6, rtol=1e-4, msg=f"{i}.{k}")


@pytest.mark.slow  # default-suite time; the CNN's K=8 comparison stays in the default suite
def test_eight_steps_per_execution_train_as_one_at_a_time_lstm(tmp_path):
    data = write_aclimdb(tmp_path / "data", per_class=40)  # 81 training reviews: 10 steps of 8 an epoch
    args = lstm_fit(data, "maxlen=64", "model.net.embed_dim=32")  # validation on one batch, as above
    for k in (1, 8):
        fit(tmp_path / f"k{k}", *args, f"steps_per_execution={k}")
    assert_same_training(tmp_path / "k1", tmp_path / "k8")


@pytest.mark.slow
def test_eight_steps_per_execution_train_as_one_at_a_time_resnet(cifar_root, tmp_path):
    """SGD with Nesterov momentum and weight decay, and BatchNorm's running statistics in the carried state.
    Streamed batches: on device-resident data XLA fuses the gather into the step around its fused batch norm
    differently in the two programs, and this ResNet's float32 BatchNorm amplifies the last bits: measured
    8.4e-4 on weights after 16 steps, with the epoch's train loss 5e-6 relative apart (2026-11-24)."""
    args = (*CNN, "recipe=cifar10_resnet", "depth=8", f"data_dir={cifar_root}", "on_device=false")
    for k in (1, 8):
        fit(tmp_path / f"k{k}", *args, f"steps_per_execution={k}")
    assert_same_training(tmp_path / "k1", tmp_path / "k8")


@pytest.mark.slow
@pytest.mark.parametrize("net", ["cnn", "lstm", "resnet"])
def test_eight_steps_per_execution_under_spmd_on_eight_devices(net, tmp_path):
    """8 devices: the CNN (1,025 fixture images: 8 steps of 8 x 16 an epoch), the scan LSTM and the ResNet's
    BatchNorm (reduction form under SPMD), with SGD. With Adam the partitioner's differently split reductions
    meet a near-zero gradient's last bits, which Adam answers with up to a whole learning-rate step
    (docs/feeding.md), which would hide what this test is for."""
    if net == "lstm":
        data = write_aclimdb(tmp_path / "data", per_class=256)  # 513 reviews: 8 steps of 8 x 8 an epoch
        args = ("recipe=imdb", "maxlen=64", "model.net.embed_dim=32", "batch_size=8")
    else:
        data = write_cifar10(tmp_path / "data", per_batch=205)
        args = (
            ("recipe=cifar10_resnet", "depth=8", "batch_size=16")
            if net == "resnet"
            else ("recipe=cifar10", "batch_size=16")
        )
    args = (
        *args,
        "accelerator=xla",
        "devices=8",
        "epochs=2",
        "model.optimizer=sgd",
        "lr=0.01",
        "trainer.limit_val_batches=1",
        "download=false",
        "test_after_fit=false",
        f"data_dir={data}",
        NO_HOLDOUT,
    )
    for k in (1, 8):
        fit(tmp_path / f"k{k}", *args, f"steps_per_execution={k}", devices=8)
    assert_same_training(tmp_path / "k1", tmp_path / "k8")
    assert epochs(tmp_path / "k8")[1]["xla_compiles"] == 0


@pytest.mark.parametrize(
    "value, message",
    [
        ("13", "steps_per_execution=13 is more than the 12 training steps of an epoch; use at most 12"),
    ],
)
def test_a_bad_steps_per_execution_is_one_line(cifar_root, tmp_path, value, message):
    proc = fit(tmp_path, *CNN, f"data_dir={cifar_root}", f"steps_per_execution={value}", check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


def test_steps_per_execution_is_refused_off_xla(cifar_root, tmp_path):
    proc = fit(tmp_path, *CNN, "accelerator=cpu", f"data_dir={cifar_root}", "steps_per_execution=8", check=False)
    assert proc.returncode == 2 and "accelerator=cpu runs one step at a time, so leave it at 1" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


def test_the_while_loop_runs_the_same_steps_as_the_unrolled_program(tmp_path):
    """The two forms of one K=4 program on the same group, full and with remainders of 3 and 1 (the last on the
    next epoch's order, a shared input): the same state. The metric sums count 8 steps: a While loop over the
    padding steps (or short of the real ones) would not. Neither a remainder nor a new order compiles: a count of 1
    sent with `.to()` would be a constant of the graph (torch_xla's special scalars), and so would an order left
    out of the program's inputs."""
    import sys

    from helpers import cli_env

    proc = run_paced([sys.executable, str(SCRIPTS / "while_against_unrolled.py")], 300, env=cli_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unroll steps counted 8" in proc.stdout and "while steps counted 8" in proc.stdout
    for loop in ("unroll", "while"):
        assert f"{loop} compiled after the first execution 0" in proc.stdout, proc.stdout
        assert f"{loop} read each epoch's order True" in proc.stdout, proc.stdout
    assert proc.stdout.strip().endswith("equal")
