"""The checkpoint file: written atomically, read without running code, and self-sufficient for inference.

A Lightning checkpoint plus one block, "xla_train", naming the net (models/reference.py: a built-in net by its key,
a user's by its import path, which loading never imports unasked), its init arguments, and the preprocessing and
labels raw inputs need. Only torch is imported here, so
serving needs neither Lightning nor torch_xla. `atomic_write` is also the one writer of the other files a crash
must not half-write: config.yaml, exports, prediction tables, the IMDB token cache (docs/serving.md).
"""

from __future__ import annotations

import errno
import gc
import os
import pickle
import secrets
import warnings
from pathlib import Path

import torch

from xla_train.errors import CheckpointError

FORMATS = (1, 2)  # 1: a built-in net by key; 2: any net by its class path (models/reference.py)


def to_cpu(obj, moved: dict | None = None):
    """Plain CPU tensors all the way down, whatever device they were on; `moved` maps id(tensor) to its CPU copy
    where the caller has already moved some (all of a device's at once, runtime/checkpoint_io.py)."""
    if isinstance(obj, torch.Tensor):
        return moved[id(obj)] if moved and id(obj) in moved else obj.detach().cpu()
    if isinstance(obj, dict):
        return obj.__class__((k, to_cpu(v, moved)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v, moved) for v in obj)
    return obj


def tensors_in(obj) -> list[torch.Tensor]:
    """Every tensor in nested dicts, lists and tuples, in to_cpu's order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors_in(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors_in(v)]
    return []


class FolderSyncError(OSError):
    """The file is in place, but its folder could not be flushed: a crash now could still lose the rename."""


def atomic_write(path: str | os.PathLike, write) -> None:
    """write(file) into a temp file beside `path`, fsync it, rename it over `path`, fsync the folder.

    A crash or a full disk at any point leaves the previous file untouched and no temp file behind;
    an OSError propagates for the caller to word (FolderSyncError when only the folder's fsync failed).
    The file gets the ordinary mode (0666 less the umask), as any other file its user writes, so that
    others on shared storage can read it where the umask allows; mkstemp's 0600 would not.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        # EINVAL/ENOTSUP: this file system cannot fsync a folder at all (POSIX allows it), so nothing failed
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise FolderSyncError(e.errno, e.strerror or str(e), str(path.parent)) from None


def atomic_save(obj, path: str | os.PathLike, moved: dict | None = None) -> None:
    """torch.save of plain CPU tensors (`moved`: see to_cpu), written atomically. It serialises straight into the
    temporary file: a copy in memory first was a second checkpoint-sized block at each save, the host's peak."""
    cpu = to_cpu(obj, moved)
    try:
        atomic_write(path, lambda f: _save_uncycled(cpu, f))
    except FolderSyncError as e:
        raise CheckpointError(
            f"wrote checkpoint {path}, but could not flush its folder to disk: {e.strerror}; "
            f"a crash before the storage flushes may lose it: check the storage"
        ) from None
    except OSError as e:
        raise CheckpointError(
            f"could not write checkpoint {path}: {e.strerror or e}; the previous checkpoint, if any, is intact"
        ) from None


def _save_uncycled(obj, f) -> None:
    """torch.save, then free what it leaves in a reference cycle. torch 2.9's _save defines its pickler class anew
    at each call, and that class reaches every storage it wrote through its persistent_id closure: a cycle, so the
    host copies of a device's tensors stayed resident until Python's next full collection. A long run's
    resident memory climbed epoch after epoch that way until a collection happened to free it (docs/results.md,
    "Peak memory"). With the collector paused during the save, everything the save made is in
    the youngest generation, which a collection of that generation alone frees at once, however many tensors."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        torch.save(obj, f)
    finally:
        if enabled:
            gc.enable()
        gc.collect(0)


def safe_load(path: str | os.PathLike) -> dict:
    """torch.load with weights_only=True; every failure is one line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes)")
    try:
        with warnings.catch_warnings():  # torch warns about odd pickle protocols before refusing them
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a corrupt file can fail anywhere inside the unpickler
        text = str(e).strip()
        refused = next((ln.strip() for ln in text.splitlines() if "Unsupported global" in ln), None)
        if isinstance(e, pickle.UnpicklingError) and refused:
            found = refused.replace("WeightsUnpickler error: ", "").replace("GLOBAL ", "")
            raise unsafe_checkpoint(path, found.split(" was not an allowed global")[0].rstrip(".")) from None
        callable_ = pickled_global(path) if isinstance(e, pickle.UnpicklingError) else None
        if callable_:  # a bare pickle (not torch's zip format) that names a callable
            raise unsafe_checkpoint(path, f"Unsupported global: {callable_}") from None
        detail = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("Unsupported")), None)
        first = detail or (text.splitlines()[0] if text else type(e).__name__)
        if "weights_only" in first.lower() or "weights only" in first.lower():  # torch's advice: never repeated
            first = "torch's weights-only loader refused it"
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated, or not a torch file: {first})"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is a torch file but not an xla_train checkpoint (no state_dict)")
    return ckpt


def unsafe_checkpoint(path, found: str) -> CheckpointError:
    """One line for every command that loads a checkpoint: what was found, and a safe way on (never the unsafe
    load torch's own message suggests)."""
    return CheckpointError(
        f"checkpoint {path} is unsafe: it holds objects that a weights-only load refuses ({found}), and loading "
        f"them could run code from the file, so it was not loaded; re-save it with xla_train, or convert it to "
        f"plain tensors in a process you trust"
    )


def pickled_global(path, limit: int = 1 << 20) -> str | None:
    """The first callable a plain pickle names ("io.open"), read from its opcodes without running any."""
    import pickletools

    strings: list[str] = []
    try:
        with open(path, "rb") as f:
            for op, arg, pos in pickletools.genops(f):
                if pos > limit:
                    return None
                if op.name in ("GLOBAL", "INST"):
                    return str(arg).replace(" ", ".")
                if op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    return f"{strings[-2]}.{strings[-1]}"
                if isinstance(arg, str):
                    strings.append(arg)
    except Exception:  # not a pickle, or a damaged one: nothing can be said of what it holds
        return None
    return None


def read_inference_block(ckpt: dict, path) -> dict:
    block = ckpt.get("xla_train")
    if not isinstance(block, dict) or not ({"arch", "class_path"} & set(block)):
        raise CheckpointError(f"{path} is a Lightning checkpoint but not from xla_train (no 'xla_train' block)")
    if block.get("format") not in FORMATS:
        raise CheckpointError(
            f"{path} has checkpoint format {block.get('format')!r}; this xla_train reads formats "
            f"{' and '.join(map(str, FORMATS))}"
        )
    return block


def net_state_dict(ckpt: dict) -> dict[str, torch.Tensor]:
    """The net's own weights: the LightningModule's `net.` prefix removed."""
    return {k[len("net.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("net.")}


def load_net_weights(net, state: dict[str, torch.Tensor], what: str) -> None:
    """Every weight the checkpoint holds into `net`, and nothing else (strict), or one line: `what` (the file and
    the net) and which names or shapes differ. A net that kept one initial weight, or dropped a stored one, would
    answer as another net without a word."""
    own = net.state_dict()
    missing, extra = [k for k in own if k not in state], [k for k in state if k not in own]
    differences = []
    if missing:
        differences.append(f"the file lacks {_names(missing)}")
    if extra:
        differences.append(f"it holds {_names(extra)}, which the net has not")
    if differences:
        raise CheckpointError(f"{what} ({'; '.join(differences)})")
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as e:  # a shape that differs: torch's second line names the weight and both shapes
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
        raise CheckpointError(f"{what} ({lines[min(1, len(lines) - 1)]})") from None


def _names(keys: list[str], shown: int = 3) -> str:
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more
