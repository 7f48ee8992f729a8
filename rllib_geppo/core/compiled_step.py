"""A minibatch's losses and their backward pass, compiled once with ``torch.compile``.

:class:`CompiledBackward` runs ``loss_fn(*args)`` and the backward pass of the sum of its losses
either eagerly or through inductor (forward and backward compiled together by AOTAutograd). The
shapes are traced as dynamic, so the store's growth during the first iterations (a larger
minibatch each update) does not compile again; anything that changes between updates must come
in as a tensor (the clip range does), not as a Python number, or it would recompile. Gradient
clipping and the optimizer step stay with the caller, eager.

Pure torch; no Ray.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

import torch

logger = logging.getLogger(__name__)

Tensor = torch.Tensor

#: Values of the ``compile_learner`` setting.
COMPILE_SETTINGS = ("auto", True, False)


def resolve_compile(setting: bool | str, device: torch.device) -> bool:
    """Whether a learner on ``device`` compiles its minibatch step.

    True and False are taken as given. ``"auto"`` compiles nowhere yet: on CPU the compiled step
    measured 1.3x to 1.4x faster than eager for the paper's 64x64 networks
    (``benchmarks/learner_step.py``, 2 cores), but compiling took 50 s (5 to 9 s from inductor's
    on-disk cache), repaid only after 55 to 460 updates, which short runs, tests and sweeps of
    short trials never reach; on GPUs it is not measured yet.
    """
    if setting not in COMPILE_SETTINGS:
        raise ValueError(f"compile_learner must be one of {COMPILE_SETTINGS}, got {setting!r}.")
    return setting is True


class CompiledBackward:
    """``loss_fn``'s losses and their backward pass, compiled on the first call.

    Args:
        loss_fn: returns a tuple of 0-d loss tensors; their sum is differentiated.
        compile: False runs eagerly throughout.
        name: what the log messages call the step.

    If compiling fails (no C compiler, an operation inductor cannot trace, ...), at the first
    call or at a later recompile, the step runs eagerly from then on and one warning says why
    (an error that is not the compiler's then comes from the eager step). Attributes: ``compiled`` (whether calls go
    through the compiled function), ``compile_seconds`` (wall time of the first compiled call,
    compilation included; None before it) and ``graphs_compiled`` (how many graphs inductor
    compiled; 1 unless something recompiled).
    """

    def __init__(self, loss_fn: Callable[..., Sequence[Tensor]], *, compile: bool, name: str = "step"):
        self._eager = loss_fn
        self._name = name
        self.compiled = compile
        self.compile_seconds: float | None = None
        self.graphs_compiled = 0
        self._compiled_fn = torch.compile(loss_fn, backend=self._backend, dynamic=True) if compile else None

    def _backend(self, graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
        """Inductor, counting the graphs it compiles (every compile and recompile; an attempt
        that dynamo restarts, as it does once to settle dynamic shapes, is not counted)."""
        from torch._inductor.compile_fx import compile_fx

        compiled = compile_fx(graph, example_inputs)
        self.graphs_compiled += 1
        return compiled

    def __call__(self, *args, zero_grad: Callable[[], None]) -> tuple[Tensor, ...]:
        """``zero_grad()``, then the losses of ``args`` and their backward pass; returns the
        losses (with their graphs freed)."""
        zero_grad()
        if not self.compiled:
            return _losses_and_backward(self._eager, args)
        start = time.perf_counter()
        try:
            losses = _losses_and_backward(self._compiled_fn, args)
        except Exception as err:  # noqa: BLE001 - a failed compile or recompile: eager from now on
            logger.warning("Could not compile GePPO's %s (%s: %s); it runs eagerly.",
                           self._name, type(err).__name__, str(err).splitlines()[0] if str(err) else "")
            self.compiled = False
            zero_grad()  # a failed backward pass may have left some gradients
            return _losses_and_backward(self._eager, args)
        if self.compile_seconds is None:
            self.compile_seconds = time.perf_counter() - start
            logger.info("Compiled GePPO's %s with torch.compile in %.1f s.", self._name, self.compile_seconds)
        return losses


def _losses_and_backward(loss_fn: Callable[..., Sequence[Tensor]], args: tuple) -> tuple[Tensor, ...]:
    losses = tuple(loss_fn(*args))
    sum(losses).backward()
    return losses
