"""Lightning's start-up lines wait for the run: a command refused before it starts says one line and nothing else.

Lightning logs "Seed set to 0", "GPU available: ...", "Using bfloat16 Automatic Mixed Precision" as it builds the
Trainer, before xla_train has checked the data and the net. A refusal after them read as three or four lines, the
first of them about a seed. So while a command is being built, Lightning's records are held at the handlers that
would print them (its own, or the root logger's where it propagates there); they are printed, in order, once the run
starts, and dropped when it is refused. Other loggers' records pass untouched.

Warnings a user cannot act on are not shown: jsonargparse's "Unable to serialize instance" for a net instance (the
config records `model.net: null` for it, on purpose), Lightning's model summary on bf16-mixed (the weights are
float32, as it says), and torch 2.10+'s FutureWarning at the LeafSpec Lightning 2.6 builds each fit (Lightning #21326).
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager

LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
SETTLED_WARNINGS = (
    r"\s*Unable to serialize instance",
    r"Precision bf16-mixed is not supported by the model summary",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
)


class _Hold(logging.Filter):
    def __init__(self, handler: logging.Handler, held: list) -> None:
        super().__init__()
        self.handler, self.held = handler, held

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] != "lightning":
            return True
        self.held.append((self.handler, record))
        return False


class StartupLines:
    def __init__(self) -> None:
        self._holds: list[_Hold] = []
        self._held: list[tuple[logging.Handler, logging.LogRecord]] = []  # in the order they were logged

    def hold(self) -> None:
        handlers: list[logging.Handler] = []
        for name in LIGHTNING_LOGGERS:  # every handler a record of theirs reaches, as Logger.callHandlers walks
            logger = logging.getLogger(name)
            while logger is not None:
                handlers += logger.handlers
                logger = logger.parent if logger.propagate else None
        for handler in dict.fromkeys(handlers):  # each once
            hold = _Hold(handler, self._held)
            handler.addFilter(hold)
            self._holds.append(hold)

    def _end(self, emit: bool) -> None:
        for hold in self._holds:
            hold.handler.removeFilter(hold)
        held, self._holds, self._held = self._held, [], []
        for handler, record in held if emit else ():
            handler.handle(record)

    def release(self) -> None:
        """The run starts: print what was held, and hold nothing more."""
        self._end(emit=True)

    def drop(self) -> None:
        self._end(emit=False)


@contextmanager
def settled_warnings():
    """SETTLED_WARNINGS not shown for the block: a run, or a Trainer xla_train builds itself (predict split=)."""
    with warnings.catch_warnings():
        for message in SETTLED_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        yield


@contextmanager
def held_startup_lines():
    """Hold Lightning's lines for the block, and settle SETTLED_WARNINGS there; a block that raises drops the lines,
    one that ends prints any still held."""
    lines = StartupLines()
    lines.hold()
    with settled_warnings():
        try:
            yield lines
        except BaseException:
            lines.drop()
            raise
    lines.release()
