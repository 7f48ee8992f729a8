"""A gradient step compiled once with ``torch.compile``, with an eager twin to fall back on.

:func:`losses_and_gradients` differentiates a loss with ``torch.func.grad``, a functional
transform that ``torch.compile`` traces, so the forward pass, the loss, the backward pass and
whatever the step does with the gradients (clip, finite check) compile into one function:
a few large kernels instead of hundreds of small ones. :class:`CompiledStep` runs such a
function compiled, or its eager twin (written with ``loss.backward()``, which is faster
eagerly), falling back to the twin for good if compiling
fails. Shapes are traced as dynamic, so the store's growth during the first iterations (a
larger minibatch each update) compiles nothing new; anything that changes between updates must
come in as a tensor (the clip range does), not as a Python number, or it would recompile.
The compile runs in the caller's thread, never beside running steps: torch.compile is not
thread safe (pytorch/pytorch issues 105943 and 118260).

Pure torch; no Ray.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rllib_geppo.core.rules import one_of

logger = logging.getLogger(__name__)

Tensor = torch.Tensor

#: Values of the ``compile_learner`` setting.
COMPILE_SETTINGS = ("auto", True, False)
#: How many steps of one function (one per trained module) may compile beyond dynamo's cap.
MAX_STEPS_PER_FUNCTION = 1024
#: ``compile_learner="auto"`` compiles after this many eagerly run minibatch steps (10 updates
#: of the default 10 epochs x 32 minibatches): runs shorter than that (tests, smoke runs, the
#: first iterations of a sweep's trials) never pay for compiling.
AUTO_COMPILE_AFTER_STEPS = 3200


def resolve_compile(setting: bool | str) -> int | None:
    """After how many eager minibatch steps a learner compiles its step; None: never.

    True compiles from the first step and False never. ``"auto"`` compiles after
    :data:`AUTO_COMPILE_AFTER_STEPS` steps: for the paper's 64x64 networks the compiled step
    measured 2x to 3x faster than eager on CPU (``benchmarks/learner_step.py``, 2 cores;
    compiling took 2.6 to 11.7 s, repaid within 15 to 68 updates) and 3.1x on an H100, where
    an eager step is bound by kernel-launch latency. With several learners the compiled part
    ends before the clip: the learners average their gradients in between.
    """
    one_of(COMPILE_SETTINGS).check("compile_learner", setting)
    if setting is False:
        return None
    if setting is True:
        return 0
    return AUTO_COMPILE_AFTER_STEPS


def losses_and_gradients(
    loss_fn: Callable[..., Sequence[Tensor]], params: dict[str, Tensor], *args
) -> tuple[tuple[Tensor, ...], dict[str, Tensor]]:
    """The losses ``loss_fn(params, *args)`` and the gradient of their sum with respect to
    ``params`` (by name), by ``torch.func.grad``: nothing is accumulated in ``.grad``."""

    def total(params: dict[str, Tensor]) -> tuple[Tensor, tuple[Tensor, ...]]:
        losses = tuple(loss_fn(params, *args))
        return sum(losses), tuple(loss.detach() for loss in losses)

    grads, losses = torch.func.grad(total, has_aux=True)(params)
    return losses, grads


class CompiledStep:
    """``fn`` compiled on its first compiled call, with ``eager`` (same arguments, same results)
    as its twin.

    Args:
        fn: the step to compile; its gradients come from :func:`losses_and_gradients`, so it
            runs under ``torch.no_grad``.
        eager: the same step, run as it is (with grad mode on).
        compile_after: how many calls run ``eager`` before the first compiled one; None: all.
        name: what the log messages call the step.
        inductor_options: inductor settings for the compile (``torch._inductor.config`` names,
            such as ``{"triton.cudagraphs": True}`` for CUDA graphs); none by default.

    ``fn`` compiles as one graph (``fullgraph=True``). If compiling fails (no C compiler, an
    operation dynamo cannot trace, which would otherwise split the step into graphs with eager
    code between them, ...), at the first compiled call or at a later recompile, the step runs
    eagerly from then on and one warning says why. Attributes: ``compiled`` (whether the next
    call goes through the compiled function), ``compile_seconds`` (wall time of the first
    compiled call, compilation included; None before it) and ``graphs_compiled`` (how many
    graphs inductor compiled; 1 unless something recompiled).
    """

    def __init__(
        self,
        fn: Callable,
        eager: Callable,
        *,
        compile_after: int | None,
        name: str = "step",
        inductor_options: dict[str, Any] | None = None,
    ):
        self._eager, self._name = eager, name
        self._inductor_options = dict(inductor_options or {})
        self._eager_calls_left = compile_after
        self._compiled_fn = (
            None
            if compile_after is None
            else torch.compile(fn, backend=self._backend, dynamic=True, fullgraph=True)
        )
        self.compile_seconds: float | None = None
        self.graphs_compiled = 0

    @property
    def compiled(self) -> bool:
        return self._compiled_fn is not None and self._eager_calls_left == 0

    def _backend(self, graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
        """Inductor, counting the graphs it compiles (every compile and recompile; an attempt
        that dynamo restarts, as it does once to settle dynamic shapes, is not counted)."""
        from torch._inductor.compile_fx import compile_fx

        compiled = compile_fx(graph, example_inputs, config_patches=self._inductor_options)
        self.graphs_compiled += 1
        return compiled

    def __call__(self, *args):
        if not self.compiled:
            if self._eager_calls_left:
                self._eager_calls_left -= 1
            return self._eager(*args)
        start = time.perf_counter()
        try:
            with torch.no_grad(), self._first_compile_uncapped():
                out = self._compiled_fn(*args)
        except Exception as err:  # noqa: BLE001 - a failed compile or recompile: eager from now on
            self._give_up(err)
            return self._eager(*args)
        if self.compile_seconds is None:
            self.compile_seconds = time.perf_counter() - start
            logger.info("Compiled GePPO's %s with torch.compile in %.1f s.", self._name, self.compile_seconds)
        return out

    def _first_compile_uncapped(self) -> contextlib.AbstractContextManager:
        """Steps of one function (one per trained module) share its compile cache, which
        dynamo caps at ``recompile_limit`` (8) entries: each step's first compile may add one
        beyond the cap, so that a ninth module compiles too."""
        if self.compile_seconds is not None:
            return contextlib.nullcontext()
        config = torch._dynamo.config
        # cache_size_limit: the cap's name in older torch releases.
        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        return config.patch(**{name: getattr(config, name) + MAX_STEPS_PER_FUNCTION})

    def _give_up(self, err: Exception) -> None:
        logger.warning(
            "Could not compile GePPO's %s (%s: %s); it runs eagerly.",
            self._name,
            type(err).__name__,
            str(err).splitlines()[0] if str(err) else "",
        )
        self._compiled_fn = None
