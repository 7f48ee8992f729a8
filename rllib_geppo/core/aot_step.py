"""A step compiled ahead of time by AOTInductor: one call into compiled C++ per step.

``torch.compile`` leaves Python around a compiled step: dynamo's guards and the bytecode that
unpacks the inputs on every call, and the generated Python that calls each kernel in turn. For
a step as small as the paper's (some 40 kernels on 128 rows) that is about as long as the
kernels themselves. AOTInductor compiles the same graph, traced by ``torch.export``, into a
shared library whose C++ wrapper calls the kernels: one call per step, nothing else.

:class:`AheadOfTimeStep` compiles a function of tensors after a number of calls to another
callable (the eager step before it, and its fallback for good if exporting or compiling fails,
which one warning says). The first dimension of the trailing ``dynamic`` arguments (a
minibatch's rows) is dynamic, so the store's growth and a batch's extra rows compile nothing
new. Compiled packages are kept under inductor's cache folder, named by a hash of everything
they depend on (torch's version, the function's name and static settings, the inputs' shapes
and dtypes, the inductor options), so the trials of a sweep compile once per machine. Pure
torch; no Ray.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

Tensor = torch.Tensor


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


class AheadOfTimeStep:
    """``fn`` compiled ahead of time on the first call after ``compile_after`` calls to
    ``before``, which stands in for it until then, and for good if compiling fails.

    Args:
        fn: the step, a function of tensors returning a tuple of tensors.
        before: the same step by other means (same arguments, same results).
        compile_after: how many calls go to ``before`` first; None: all of them.
        dynamic: how many trailing arguments have a dynamic first dimension (one size for all).
        key: what besides the inputs' shapes the compiled code depends on (static settings),
            for the cache.
        name: what the log messages call the step.
        inductor_options: inductor settings for the compile.
        folder: where packages are kept (default :func:`package_folder`).

    Attributes: ``compiled`` (whether calls go to the compiled step) and ``compile_seconds``
    (the export, compile and load; about 0 when the package was cached; None before).
    """

    def __init__(
        self,
        fn: Callable[..., tuple[Tensor, ...]],
        before: Callable[..., tuple[Tensor, ...]],
        *,
        compile_after: int | None,
        dynamic: int,
        key: str,
        name: str = "step",
        inductor_options: dict[str, Any] | None = None,
        folder: Path | None = None,
    ):
        self._fn, self._before, self._dynamic = fn, before, dynamic
        self._folder = folder
        self._key, self._name = key, name
        self._inductor_options = dict(inductor_options or {})
        self._calls_left = compile_after
        self._runner: Callable | None = None
        self.compile_seconds: float | None = None

    @property
    def compiled(self) -> bool:
        return self._runner is not None

    def __call__(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        if self._runner is None:
            if self._calls_left is None or self._calls_left > 0:
                if self._calls_left:
                    self._calls_left -= 1
                return self._before(*tensors)
            self._compile(tensors)
            if self._runner is None:
                return self._before(*tensors)
        try:
            return tuple(self._runner(*tensors))
        except Exception as err:  # noqa: BLE001 - inputs the package was not built for
            self._give_up(err)
            return self._before(*tensors)

    def package_path(self, tensors: tuple[Tensor, ...]) -> Path:
        """The cached package's path for these inputs (the dynamic dimension left out)."""
        fixed = len(tensors) - self._dynamic
        shapes = [
            (tuple(t.shape) if i < fixed else tuple(t.shape[1:]), str(t.dtype), t.device.type)
            for i, t in enumerate(tensors)
        ]
        text = repr(
            (torch.__version__, self._name, self._key, shapes, sorted(self._inductor_options.items()))
        )
        folder = self._folder or package_folder()
        return folder / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.pt2"

    def _compile(self, tensors: tuple[Tensor, ...]) -> None:
        self._calls_left = None  # one attempt: a failure leaves ``before`` for good
        start = time.perf_counter()
        path = self.package_path(tensors)
        cached = path.exists()
        try:
            if not cached:
                self._build(tensors, path)
            self._runner = torch._inductor.aoti_load_package(str(path), run_single_threaded=True)
        except Exception as err:  # noqa: BLE001 - no C++ compiler, an untraceable operation, ...
            self._give_up(err)
            return
        self.compile_seconds = time.perf_counter() - start
        how = f"loaded from {path}" if cached else "compiled ahead of time"
        logger.info("GePPO's %s %s in %.1f s.", self._name, how, self.compile_seconds)

    def _build(self, tensors: tuple[Tensor, ...], path: Path) -> None:
        rows = torch.export.Dim("rows", min=2)
        fixed = len(tensors) - self._dynamic
        shapes = (tuple(None if i < fixed else {0: rows} for i in range(len(tensors))),)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.pt2")
        with torch.no_grad(), warnings.catch_warnings():
            # torch's exporter copies its own leaf TreeSpec, whose class warns that it is deprecated.
            warnings.filterwarnings(
                "ignore", message=r"`isinstance\(treespec, LeafSpec\)`", category=FutureWarning
            )
            program = torch.export.export(_Function(self._fn), tensors, dynamic_shapes=shapes)
            torch._inductor.aoti_compile_and_package(
                program, package_path=str(partial), inductor_configs=self._inductor_options
            )
        partial.replace(path)  # whole or not at all, for trials compiling it side by side

    def _give_up(self, err: Exception) -> None:
        logger.warning(
            "Could not compile GePPO's %s ahead of time (%s: %s); it runs as before.",
            self._name,
            type(err).__name__,
            str(err).splitlines()[0] if str(err) else "",
        )
        self._runner = None
