"""`predict ckpt=PATH split=test|val|train`: a whole split of the checkpoint's own data, on any accelerator.

The recipe and data settings are the run's own config.yaml, rebuilt through fit's path (config/build.py), so the
split is the one the run trained and validated on; data_dir= and batch_size= override. A text checkpoint encodes
the reviews with its own tokenizer, never one rebuilt from the data folder. Hardware comes from runtime.plan, the
predicting from training/split_prediction.py, the table from serve/table.py (docs/serving.md, "Predict a split").
"""

from __future__ import annotations

from pathlib import Path

from xla_train.checkpoint import load_net_weights, net_state_dict, read_inference_block, safe_load
from xla_train.config.fit_checkpoint import fit_checkpoint_to
from xla_train.models.reference import NetRef
from xla_train.training.run_folder import RunFolder
from xla_train.errors import ConfigError

SPLITS = ("test", "val", "train")


def run_config(ckpt: Path) -> Path:
    """The config.yaml of the run that wrote `ckpt` (runs/NAME/version_N/checkpoints/FILE.ckpt)."""
    run = RunFolder.of_checkpoint(ckpt)
    if run is not None:
        return run.config
    raise ConfigError(
        f"{ckpt} has no saved run config: predicting a split reads the recipe and data settings "
        f"from the config.yaml of its run folder (runs/NAME/version_N/), which is not there"
    )


def predict_split(
    ckpt,
    split: str = "test",
    accelerator: str = "auto",
    devices="auto",
    batch_size: int | None = None,
    data_dir: str | None = None,
    out=None,
    probs: bool = False,
    net=None,
    runtime: str = "auto",
):
    """(the CSV written, the SplitPredictions): every sample of `split`, in order, one row each. `net` names a
    checkpoint's own net (a class path, a class or an instance)."""
    from xla_train.serve.table import check_out, default_out, table_text, write_new

    if split not in SPLITS:
        raise ConfigError(f"split={split!r} is not a split; use split=test, split=val or split=train")
    ckpt = Path(ckpt)
    out_path = check_out(out) if out is not None else None
    loaded = safe_load(ckpt)
    block, state = read_inference_block(loaded, ckpt), net_state_dict(loaded)
    config = run_config(ckpt)
    net, dm = build_from_run(config, ckpt, block, batch_size, data_dir, net)
    load_net_weights(net, state, f"{ckpt}: its weights do not fit the net of {config}")
    net.eval()
    inputs, labels = dm.arrays(split)  # a missing or corrupt data set fails here, before anything runs

    from xla_train.config.startup_lines import settled_warnings
    from xla_train.runtime.plan import plan_hardware
    from xla_train.training.split_prediction import predict_arrays

    # float32 everywhere: the table must be the checkpoint's own predictions, equal to CPU `predict`'s
    # (the cpu/gpu fast path's bf16 default is for training speed)
    plan = plan_hardware(accelerator, devices, precision="32-true", runtime=runtime)
    dm.place(*plan.resident_data)
    with settled_warnings():
        result = predict_arrays(net, dm, split, plan.trainer_kwargs)
    text = table_text(result.probs, result.labels, list(block["labels"]), probs)
    candidates = [out_path] if out_path is not None else default_out(config.parent, split, ckpt)
    return write_new(candidates, text), result


def build_from_run(config: Path, ckpt: Path, block: dict, batch_size=None, data_dir=None, net=None):
    """(net, data module) as the run's saved config builds them, the net checked against the checkpoint's. A user's
    net is built only from the class the user names (`net`), never from the config's word."""
    from torch import nn

    from xla_train.config.build import build_parts
    from xla_train.models.reference import class_path_of, unnamed

    ref = NetRef.from_block(block, ckpt)
    if ref.key is None and net is None:
        raise unnamed(ref, ckpt)
    overrides, instance = {}, net if isinstance(net, nn.Module) else None
    if net is not None and instance is None:
        overrides["model.net.class_path"] = net if isinstance(net, str) else class_path_of(net)
    if data_dir is not None:
        overrides["data_dir"] = str(data_dir)
    if batch_size is not None:
        overrides["batch_size"] = str(batch_size)
    import json
    import tempfile

    import yaml

    saved = yaml.safe_load(config.read_text()) or {}
    for key in ("ckpt_path", "weights_only"):  # the subcommand's own options; building the parts runs none
        saved.pop(key, None)
    if instance is None and (saved.get("model") or {}).get("net") is None:  # a builder's run, or an instance's: the
        for name, value in ref.plain_args().items():  # checkpoint's plain arguments for the net the user named
            overrides.setdefault(f"model.net.init_args.{name}", json.dumps(value))  # JSON is YAML
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp, "config.yaml")
        recipe.write_text(yaml.safe_dump(saved))
        model, dm = build_parts(str(recipe), overrides, instance)
    fit_checkpoint_to(block, model.net_reference(), model.net, dm, ckpt, f"its run config {config}")
    return model.net, dm


def split_data(ckpt, split: str = "test", data_dir: str | None = None, net=None):
    """(raw inputs -> the net's CPU input, raw inputs, labels) of a checkpoint's own split, read and encoded as
    its run reads them (a text checkpoint's with its own tokenizer): what the benchmarks score a changed model on."""
    import numpy as np

    ckpt = Path(ckpt)
    block = read_inference_block(safe_load(ckpt), ckpt)
    _, dm = build_from_run(run_config(ckpt), ckpt, block, data_dir=data_dir, net=net)
    inputs, labels = dm.arrays(split)
    return dm.net_inputs, inputs, np.asarray(labels, dtype=np.int64)
