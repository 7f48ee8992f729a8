"""A step compiled ahead of time (rllib_geppo/core/compiled_step.py): its function's results for
any number of rows, the eager step until then, a cached package named by what it was built
for, torch.compile where it cannot be exported, and eager for good where nothing compiles."""

import logging
import platform
import sys
import warnings

import pytest
import torch

from rllib_geppo.core import compiled_step
from rllib_geppo.core.compiled_step import CompiledStep, instruction_set, package_folder, package_key


def step_fn(scale: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return rows * scale + 1.0, (rows * rows).sum(0)


class Counted:
    """``step_fn``, counting its calls: the eager step before (and instead of) the compiled one."""

    def __init__(self, fn=step_fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *tensors):
        self.calls += 1
        return self.fn(*tensors)


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Packages in a folder of the test's own (inductor's caches stay where they are, so a
    rerun compiles faster)."""
    monkeypatch.setattr(compiled_step, "package_folder", lambda: tmp_path)
    return tmp_path


def test_packages_are_kept_under_inductors_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert package_folder() == tmp_path / "geppo_aot"


def test_a_package_is_named_by_the_platform_and_instruction_set_it_was_built_for(monkeypatch):
    key = package_key("step", "settings", [((3,), "torch.float32", "cpu")], {})
    assert all(
        part in key for part in (torch.__version__, sys.platform, platform.machine(), instruction_set())
    )
    monkeypatch.setattr(compiled_step, "instruction_set", lambda: "avx512")
    assert package_key("step", "settings", [((3,), "torch.float32", "cpu")], {}) != key


def test_a_step_compiled_ahead_of_time_gives_its_functions_results_and_is_cached(packages, monkeypatch):
    eager = Counted()
    step = CompiledStep(step_fn, eager, compile_after=2, ahead_of_time=True, dynamic=1, key="test")
    scale = torch.tensor([1.0, -2.0, 0.5])
    for _ in range(2):
        step(scale, torch.randn(7, 3))
    assert eager.calls == 2 and step.how == "eager"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in (7, 5, 130):  # the rows are dynamic: one package serves them all
            x = torch.randn(rows, 3)
            for got, expected in zip(step(scale, x), step_fn(scale, x), strict=True):
                torch.testing.assert_close(got, expected)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]  # torch's, about itself
    assert step.how == "aot" and eager.calls == 2
    assert len(list(packages.iterdir())) == 1

    # Another step of the same function and inputs loads the package: nothing is exported again.
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: pytest.fail("exported again"))
    again = CompiledStep(step_fn, Counted(), compile_after=0, ahead_of_time=True, dynamic=1, key="test")
    torch.testing.assert_close(again(scale, x)[1], step_fn(scale, x)[1])
    assert again.how == "aot"


def data_dependent(scale: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if rows.sum() > 0:  # a branch on the data: neither torch.export nor a full graph traces it
        return (rows * scale,)
    return (rows,)


def test_a_step_that_cannot_compile_runs_eagerly_for_good_with_one_warning(packages, caplog):
    eager = Counted(data_dependent)
    step = CompiledStep(data_dependent, eager, compile_after=0, ahead_of_time=True, dynamic=1, key="test")
    with caplog.at_level(logging.WARNING, logger=compiled_step.__name__):
        for _ in range(3):
            torch.testing.assert_close(step(torch.ones(3), torch.ones(4, 3))[0], torch.ones(4, 3))
    assert step.how == "eager" and eager.calls == 3
    warned = [r.getMessage() for r in caplog.records if r.name == compiled_step.__name__]
    assert len(warned) == 1 and warned[0].startswith("Could not compile GePPO's step")  # one attempt
