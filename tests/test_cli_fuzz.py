"""Random command lines end in a parsed config or a one-line usage error, never a traceback."""
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from xla_train.cli.main import main

KEYS = ["recipe", "epochs", "batch_size", "lr", "accelerator", "devices", "seed", "precision", "strategy",
        "model.dropout", "model.net.num_classes", "trainer.max_epochs", "data.num_workers", "logger",
        "trainer.gradient_clip_val", "data.augment", "model.optimizer", "nonsense", "trainer", "model..x", ""]
VALUES = st.one_of(st.sampled_from(["quickstart", "cifar10", "cifar10_resnet", "nope", "xla", "cpu", "tpu",
                                    "-1", "0", "8", "1e-3", "abc", "true", "[1,2]", "{a: 1}", "", "null",
                                    "csv", "tensorboard", "sgd", "=", "'"]),
                   st.text(max_size=8), st.integers(-5, 100).map(str))
TOKENS = st.one_of(
    st.tuples(st.sampled_from(KEYS), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
    st.sampled_from(["fit", "validate", "test", "predict", "--trainer.max_epochs=2", "--bogus", "-x",
                     "--trainer.max_epochs", "stray", "=", "--probs"]),
    st.text(max_size=10),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([[], ["recipe=quickstart"], ["recipe=cifar10_resnet"]]), st.lists(TOKENS, max_size=6))
def test_random_command_lines_never_crash(tmp_path_factory, monkeypatch, capsys, head, tail):
    tokens = head + tail
    work = tmp_path_factory.mktemp("fuzz")
    monkeypatch.chdir(work)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    code = main(tokens + ["--print_config"])  # print_config stops before anything is built or trained
    out, err = capsys.readouterr()
    assert code in (0, 2), (tokens, code, err)
    assert "Traceback" not in err, (tokens, err)
    if code == 2:
        errors = [ln for ln in err.splitlines() if ln.startswith("xla_train: error: ")]
        assert len(errors) == 1, (tokens, err)
    else:
        assert "model:" in out and "trainer:" in out, (tokens, out)
    event(f"exit {code}")
    assert not (work / "runs").exists()
