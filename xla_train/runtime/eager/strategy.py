"""The eager runtime's strategies are Lightning's own (DDP, FSDP, ...), named as Lightning registers them."""

from __future__ import annotations

from xla_train.errors import ConfigError


def lightning_strategy(kind: str, strategy):
    """strategy= for the cpu/gpu accelerators: a name Lightning registers (ddp, fsdp, ...) or a Strategy object."""
    if not isinstance(strategy, str):
        return strategy
    from lightning.pytorch.strategies import StrategyRegistry

    names = [n for n in StrategyRegistry.available_strategies() if "xla" not in n and "tpu" not in n]
    if strategy.lower() not in names:
        main = [n for n in names if "find_unused" not in n and "_stage" not in n]  # variants of these
        raise ConfigError(
            f"strategy={strategy!r} cannot run on accelerator={kind}; use auto or one of Lightning's "
            f"strategies: {', '.join(main)} (or their variants, such as ddp_find_unused_parameters_true)"
        )
    return strategy.lower()
