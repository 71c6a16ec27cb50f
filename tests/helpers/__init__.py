"""Helpers the tests share, each defined once: `from helpers import run_cli, metrics_rows, ...`. tests/ is on the
path of the suite and of its subprocesses (helpers.path_with_tests)."""

from helpers.checkpoints import save_checkpoint
from helpers.data import CLASSES, write_cifar10
from helpers.processes import (
    PACE_MOST,
    PACE_QUIET_S,
    POD_FIT,
    POD_STEPS,
    SCRIPTS,
    SUITE_XLA_FLAGS,
    TESTS,
    cli_env,
    free_port,
    in_fresh_process,
    machine_pace,
    new_user_env,
    path_with_tests,
    pod_fit,
    require,
    run_cli,
    run_in_fresh_process,
    run_paced,
    run_pod,
    script_json,
)
from helpers.runs import epoch_value, metrics_rows
from helpers.runtimes import RUNTIME_PACKAGES, RUNTIMES, runtime_key

__all__ = [
    "CLASSES",
    "PACE_MOST",
    "PACE_QUIET_S",
    "POD_FIT",
    "POD_STEPS",
    "RUNTIME_PACKAGES",
    "RUNTIMES",
    "SCRIPTS",
    "SUITE_XLA_FLAGS",
    "TESTS",
    "cli_env",
    "epoch_value",
    "free_port",
    "in_fresh_process",
    "machine_pace",
    "metrics_rows",
    "new_user_env",
    "path_with_tests",
    "pod_fit",
    "require",
    "run_cli",
    "run_in_fresh_process",
    "run_paced",
    "run_pod",
    "runtime_key",
    "save_checkpoint",
    "script_json",
    "write_cifar10",
]
