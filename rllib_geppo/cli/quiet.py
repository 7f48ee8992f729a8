"""A quiet console for ``rllib train file``: messages of Ray, RLlib, Tune and gymnasium that are
known to be harmless are dropped, everything else passes (``-v/--verbose`` keeps them all).

Worker processes' output, Python's and C++'s, reaches the console through the driver, which
prints it to ``sys.stdout``/``sys.stderr`` line by line; the driver's own records go to the
logging handlers of Ray, RLlib and others. So :func:`quiet_console` redirects both streams
through a line filter for its block and gives every logging handler a filter of the same noise
(and ``ray.init(logging_level=WARNING)`` keeps Ray's notices out). Real warnings and errors, a
trial's traceback included, pass untouched: only lines holding one of :data:`KNOWN_NOISE` go.

The checks before Ray starts silence RLlib too: :func:`quiet_rllib` its warnings at each
validate(), :func:`quiet_fds` the known noise that C libraries (MuJoCo's compiler) print while an
env is made.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import TextIO

#: Text of messages known to be harmless in ``rllib train file`` runs, and why.
KNOWN_NOISE = (
    # RLlib's banner for algorithms that moved to the new API stack (GePPO was built on it).
    "on the new API stack! This is the new default behavior",
    # Ray core, when RLlib creates EnvRunners with restarts on: their configs travel through the
    # object store (ray-project/ray#53727); restarts work as long as the driver lives.
    "has constructor arguments in the object store and max_restarts > 0",
    # RLlib's own RLModule.__init__ builds the deprecated RLModuleConfig for every module.
    "`RLModule(config=[RLModuleConfig object])` has been deprecated",
    # Tune's hint for GPU monitoring.
    "Install gputil for GPU system monitoring",
    # Ray's notice about token authentication, on the local cluster this command starts.
    "Token authentication is enabled for this Ray cluster",
    # gymnasium: RLlib registers its env-wrapper id again in every EnvRunner.
    "Overriding environment rllib-single-agent-env-v0 already in registry",
    # Tune's timing hint: an algorithm that starts EnvRunner actors takes seconds to set up.
    "Trainable.setup took",
    # MuJoCo's compiler, on a model file of gymnasium's MuJoCo tasks; the model loads as intended.
    "compiler attribute 'settotalmass' is deprecated",
    # Tune, when rllib train file ends its run after Ctrl+C or SIGTERM: the command says what
    # happens itself, and prints its own resume command (Tune's names Tuner.restore or
    # tune.run_experiments(..., resume=True), by the entry point it was run through).
    "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run",
    "Experiment has been interrupted, but the most recent state was saved",
    "Resume experiment with: ",
)


def is_noise(line: str) -> bool:
    """Whether a console line holds one of :data:`KNOWN_NOISE`."""
    return any(noise in line for noise in KNOWN_NOISE)


class _LineFilter(io.TextIOBase):
    """A text stream that passes whole lines to ``target`` unless they hold known noise."""

    def __init__(self, target: TextIO):
        self.target = target
        self._partial = ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        kept = [line for line in lines if not is_noise(line)]
        if kept:
            self.target.write("\n".join(kept) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._partial and not is_noise(self._partial):
            self.target.write(self._partial)
        self._partial = ""
        self.target.flush()

    def isatty(self) -> bool:
        # Asked at exit too (colorama's atexit hook), when pytest has closed its capture stream.
        return not self.closed and self.target.isatty()

    @property
    def closed(self) -> bool:
        return getattr(self.target, "closed", False)

    @property
    def encoding(self) -> str:
        return getattr(self.target, "encoding", "utf-8")


def _not_noise(record: logging.LogRecord) -> bool:
    """A logging filter: whether a record holds none of :data:`KNOWN_NOISE`."""
    return not is_noise(record.getMessage())


@contextmanager
def quiet_console(enabled: bool = True) -> Iterator[None]:
    """Drops known-harmless lines from this process's console output during the block (nothing
    if not ``enabled``): what is printed, and what the logging handlers that exist write."""
    if not enabled:
        yield
        return
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = {h for logger in loggers for h in getattr(logger, "handlers", ())}
    for handler in handlers:
        handler.addFilter(_not_noise)
    with redirect_stdout(_LineFilter(sys.stdout)) as out, redirect_stderr(_LineFilter(sys.stderr)) as err:
        try:
            yield
        finally:
            out.flush()
            err.flush()
            for handler in handlers:
                handler.removeFilter(_not_noise)


@contextmanager
def quiet_fds() -> Iterator[None]:
    """Everything written to file descriptors 1 and 2 during the block (C libraries' prints
    too) goes to stderr afterwards, less the lines of :data:`KNOWN_NOISE`."""
    with tempfile.TemporaryFile() as captured:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(captured.fileno(), 1)
            os.dup2(captured.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original in zip((1, 2), saved):
                os.dup2(original, fd)
                os.close(original)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines()
            kept = [line for line in lines if not is_noise(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")


@contextmanager
def quiet_rllib() -> Iterator[None]:
    """Silence RLlib's per-validate() warnings (e.g. "running on the new API stack")."""
    rllib_logger = logging.getLogger("ray.rllib")
    level = rllib_logger.level
    rllib_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        rllib_logger.setLevel(level)
