"""A minibatch step run eagerly for a while, then compiled: ahead of time by AOTInductor, or by
``torch.compile``, or eagerly for good where compiling fails.

:func:`losses_and_gradients` differentiates a loss with ``torch.func.grad``, a functional
transform that ``torch.compile`` traces, so the forward pass, the loss, the backward pass and
whatever the step does with the gradients (clip, finite check) compile into one function: a
few large kernels instead of hundreds of small ones.

:class:`CompiledStep` holds the one countdown: ``compile_after`` calls go to the eager twin,
then the step compiles once, in the caller's thread (``torch.compile`` is not thread safe,
pytorch/pytorch issues 105943 and 118260):

- **ahead of time** (``ahead_of_time=True``, a function of tensors): ``torch.export`` traces it
  and AOTInductor compiles it into a shared library whose C++ wrapper calls the kernels, one
  call per step, without ``torch.compile``'s Python around them (guards, input unpacking, the
  generated code that calls each kernel). For a step as small as the paper's that halves it.
  Packages are kept under inductor's cache folder, named by what they were built for
  (:func:`package_key`), so the trials of a sweep compile once per machine;
- **by torch.compile**, where the step is not exported or exporting it failed;
- **eagerly**, for good, where compiling failed: one warning says why.

The first dimension of the trailing ``dynamic`` arguments (a minibatch's rows) is dynamic, so
the store's growth and a batch's extra rows compile nothing new; anything that changes between
updates must come in as a tensor (the clip range does), not as a Python number, or it would
recompile. :attr:`CompiledStep.how` says what ran last: ``"aot"``, ``"compiled"`` or
``"eager"``. Pure torch; no Ray.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
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
#: What :attr:`CompiledStep.how` reports.
HOWS = ("aot", "compiled", "eager")


def resolve_compile(setting: bool | str) -> int | None:
    """After how many eager minibatch steps a learner compiles its step; None: never.

    True compiles from the first step and False never. ``"auto"`` compiles after
    :data:`AUTO_COMPILE_AFTER_STEPS` steps: for the paper's 64x64 networks the compiled step
    measured 2x to 3x faster than eager on CPU (``benchmarks/learner_step.py``, 2 cores;
    compiling took 2.6 to 11.7 s, repaid within 15 to 68 updates) and 3.1x on an H100, where
    an eager step is bound by kernel-launch latency.
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


def compiler_problem() -> str | None:
    """Why inductor cannot compile for the CPU here (no C++ compiler), or None."""
    try:
        from torch._inductor import config
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # another torch: the compile itself will tell
        return None
    try:
        get_cpp_compiler()
    except Exception:  # noqa: BLE001 - inductor's InvalidCxxCompiler
        names = ", ".join(name for name in config.cpp.cxx if name)
        return f"no C++ compiler for torch's inductor (looked for {names})"
    return None


def instruction_set() -> str:
    """The CPU vector instruction set inductor compiles for here (``avx512``, ``avx2``,
    ``asimd``, ...; torch's ATen capability where inductor's choice cannot be read)."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        return str(pick_vec_isa()) or "none"
    except Exception:  # noqa: BLE001 - the key then names ATen's capability instead
        return torch.backends.cpu.get_cpu_capability().lower()


def package_key(name: str, key: str, shapes: Sequence, inductor_options: dict[str, Any]) -> str:
    """What a package compiled ahead of time was built for: torch's version, the platform and
    CPU instruction set (code for AVX-512 ends a process without it with a signal no fallback
    catches, so a cache folder shared between machines must keep them apart), the step, its
    static settings (``key``), its inputs' shapes and dtypes, and the inductor options."""
    return repr(
        (
            torch.__version__,
            sys.platform,
            platform.machine(),
            instruction_set(),
            name,
            key,
            list(shapes),
            sorted(inductor_options.items()),
        )
    )


def package_folder() -> Path:
    """Where compiled packages are kept: ``geppo_aot`` under inductor's cache folder (set by
    ``TORCHINDUCTOR_CACHE_DIR``; by default under the system's temporary folder)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / "geppo_aot"


class _Function(torch.nn.Module):
    """``fn`` as the module ``torch.export`` takes."""

    def __init__(self, fn: Callable[..., tuple[Tensor, ...]]):
        super().__init__()
        self.fn = fn

    def forward(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        return self.fn(*tensors)


class CompiledStep:
    """``fn`` compiled after ``compile_after`` calls to ``eager`` (see the module docstring).

    Args:
        fn: the step to compile; its gradients come from :func:`losses_and_gradients` or are
            written out by hand, so it runs under ``torch.no_grad``. With ``ahead_of_time`` a
            function of tensors that returns a tuple of tensors.
        eager: the same step, run as it is (same arguments, same results).
        compile_after: how many calls run ``eager`` before the first compiled one; None: all.
        ahead_of_time: compile with AOTInductor first, ``torch.compile`` where that fails.
        dynamic: how many trailing arguments have a dynamic first dimension (ahead of time).
        key: what besides the inputs the compiled code depends on (static settings), for the
            package's name.
        name: what the log messages call the step.
        inductor_options: inductor settings for the compile (``torch._inductor.config``
            names); none by default.

    Attributes: ``how`` (what the last call ran: one of :data:`HOWS`) and ``compile_seconds``
    (wall time of the compile, or of loading a cached package; None before it).
    """

    def __init__(
        self,
        fn: Callable,
        eager: Callable,
        *,
        compile_after: int | None,
        ahead_of_time: bool = False,
        dynamic: int = 0,
        key: str = "",
        name: str = "step",
        inductor_options: dict[str, Any] | None = None,
    ):
        self._fn, self._eager = fn, eager
        self._ahead_of_time, self._dynamic, self._key, self._name = ahead_of_time, dynamic, key, name
        self._inductor_options = dict(inductor_options or {})
        self._calls_left = compile_after  # None: never compiled
        self._compiled: Callable | None = None
        self._started = 0.0  # when compiling began
        self.how = "eager"
        self.compile_seconds: float | None = None

    @property
    def compiled(self) -> bool:
        """Whether the next call goes to the compiled step (compiling it first if need be)."""
        return self._compiled is not None or self._calls_left == 0

    def __call__(self, *args):
        if self._compiled is None:
            if self._calls_left is None or self._calls_left > 0:
                if self._calls_left:
                    self._calls_left -= 1
                return self._eager(*args)
            self._compile(args)
        if self._compiled is not None:
            first = self.compile_seconds is None
            try:
                with torch.no_grad(), _uncapped() if first else contextlib.nullcontext():
                    out = self._compiled(*args)
            except Exception as err:  # noqa: BLE001 - a failed (re)compile, inputs not built for
                self._give_up(err)
                return self._eager(*args)
            if first:  # torch.compile compiles on its first call
                self.compile_seconds = time.perf_counter() - self._started
                logger.info("Compiled GePPO's %s (%s) in %.1f s.", self._name, self.how, self.compile_seconds)
            return out
        return self._eager(*args)

    def _compile(self, args: tuple) -> None:
        """Ahead of time where asked (a failure there leaves ``torch.compile``), else the
        ``torch.compile`` wrapper, which compiles on its first call."""
        self._calls_left = None  # one attempt: a failure leaves the eager step for good
        self._started = time.perf_counter()
        if self._ahead_of_time:
            try:
                self._compiled, self.how = self._aot(args), "aot"
                return
            except Exception as err:  # noqa: BLE001 - no C++ compiler, an untraceable operation, ...
                logger.info(
                    "GePPO's %s did not compile ahead of time (%s); torch.compile compiles it.",
                    self._name,
                    _first_line(err),
                )
        self.how = "compiled"
        self._compiled = torch.compile(
            self._fn, backend="inductor", options=self._inductor_options or None, dynamic=True, fullgraph=True
        )

    def _aot(self, tensors: tuple[Tensor, ...]) -> Callable:
        """``fn`` compiled ahead of time, from the cached package where one exists."""
        fixed = len(tensors) - self._dynamic
        shapes = [
            (tuple(t.shape) if i < fixed else tuple(t.shape[1:]), str(t.dtype), t.device.type)
            for i, t in enumerate(tensors)
        ]
        text = package_key(self._name, self._key, shapes, self._inductor_options)
        path = package_folder() / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.pt2"
        if not path.exists():
            rows = torch.export.Dim("rows", min=2)
            dynamic_shapes = (tuple(None if i < fixed else {0: rows} for i in range(len(tensors))),)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.pt2")
            with torch.no_grad(), warnings.catch_warnings():
                # torch's exporter copies its own leaf TreeSpec, whose class warns it is deprecated.
                warnings.filterwarnings(
                    "ignore", message=r"`isinstance\(treespec, LeafSpec\)`", category=FutureWarning
                )
                program = torch.export.export(_Function(self._fn), tensors, dynamic_shapes=dynamic_shapes)
                torch._inductor.aoti_compile_and_package(
                    program, package_path=str(partial), inductor_configs=self._inductor_options
                )
            partial.replace(path)  # whole or not at all, for trials compiling it side by side
        runner = torch._inductor.aoti_load_package(str(path), run_single_threaded=True)
        loader = getattr(runner, "loader", None)
        if loader is None or not hasattr(loader, "boxed_run"):  # another torch: its own call
            return lambda *tensors: tuple(runner(*tensors))
        # The package's own call flattens its inputs and outputs as pytrees on every call (a
        # third of a small step's time); this step's inputs and outputs are flat already.
        return lambda *tensors: tuple(loader.boxed_run(list(tensors)))

    def _give_up(self, err: Exception) -> None:
        logger.warning("Could not compile GePPO's %s (%s); it runs eagerly.", self._name, _first_line(err))
        self._compiled, self.how = None, "eager"


def _first_line(err: Exception) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _uncapped() -> contextlib.AbstractContextManager:
    """Steps of one function (one per trained module) share its compile cache, which dynamo
    caps at ``recompile_limit`` (8) entries: each step's first compile may add one beyond the
    cap, so that a ninth module compiles too."""
    config = torch._dynamo.config
    # cache_size_limit: the cap's name in older torch releases.
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    return config.patch(**{name: getattr(config, name) + MAX_STEPS_PER_FUNCTION})
