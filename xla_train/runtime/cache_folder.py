"""Where a persistent compile cache lives, for either runtime: this machine's own cache folder unless the user names
one, made on first use. A folder that cannot be made is the user's setting gone wrong: one line, not a traceback."""

from __future__ import annotations

import os

from xla_train.errors import ConfigError


def default_compile_cache(name: str) -> str:
    """Where compile_cache=auto keeps compiled programs: a folder `name` in this machine's own cache folder, one per
    runtime (their files are not each other's)."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "xla_train", name)


def cache_folder(path: str, setting: str) -> str:
    """path as an absolute folder, made if need be."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"compile_cache={setting}: cannot make the folder {path} ({e.strerror}); give a folder you can write "
            f"to, or compile_cache=off"
        ) from None
    return os.path.abspath(path)
