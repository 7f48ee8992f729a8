"""A quiet console for ``rllib train file``: messages of Ray, RLlib, Tune and gymnasium that are
known to be harmless are dropped, everything else passes (``-v/--verbose`` keeps them all).

Worker processes' output reaches the console through the driver, which prints it to
``sys.stdout``/``sys.stderr`` line by line; the driver's own Python logging goes to stream
handlers. :func:`quiet_console` wraps both streams with a line filter and points the driver's
stream handlers at them, and raises Ray's own loggers to WARNING. Real warnings and errors, a
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
from contextlib import contextmanager
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


class QuietConsole:
    """Drops known-harmless lines from this process's console output between :meth:`start` and
    :meth:`stop`; :meth:`refresh` also takes in logging handlers created since (``ray.init``
    adds some)."""

    def __init__(self) -> None:
        self._originals: dict[str, TextIO] = {}
        self._repointed: list[tuple[logging.StreamHandler, TextIO]] = []
        self._ray_level = logging.NOTSET

    def start(self) -> None:
        self._originals = {"stdout": sys.stdout, "stderr": sys.stderr}
        sys.stdout, sys.stderr = _LineFilter(sys.stdout), _LineFilter(sys.stderr)
        self._ray_level = logging.getLogger("ray").level
        self.refresh()

    def refresh(self) -> None:
        """Point every logging stream handler that writes to the real stdout/stderr at the
        filtered streams (a handler keeps the stream it was created with), and keep Ray's
        notices ("Started a local Ray instance", Tune's file writes) out: ``ray.init`` resets
        both."""
        if not self._originals:
            return
        logging.getLogger("ray").setLevel(logging.WARNING)
        filtered = {id(self._originals["stdout"]): sys.stdout, id(self._originals["stderr"]): sys.stderr}
        loggers = [logging.getLogger()] + [
            logger
            for logger in logging.Logger.manager.loggerDict.values()
            if isinstance(logger, logging.Logger)
        ]
        for logger in loggers:
            for handler in logger.handlers:
                stream = getattr(handler, "stream", None)
                if isinstance(handler, logging.StreamHandler) and id(stream) in filtered:
                    self._repointed.append((handler, handler.setStream(filtered[id(stream)])))

    def stop(self) -> None:
        if not self._originals:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = self._originals["stdout"], self._originals["stderr"]
        for handler, stream in reversed(self._repointed):
            handler.setStream(stream)
        logging.getLogger("ray").setLevel(self._ray_level)
        self._originals, self._repointed = {}, []


@contextmanager
def quiet_console(enabled: bool = True) -> Iterator[QuietConsole | None]:
    """A :class:`QuietConsole` for the duration of the block (nothing if not ``enabled``)."""
    if not enabled:
        yield None
        return
    console = QuietConsole()
    console.start()
    try:
        yield console
    finally:
        console.stop()


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
