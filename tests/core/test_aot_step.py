"""A step compiled ahead of time (rllib_geppo/core/aot_step.py): its function's results for any
number of rows, the step it stands in for until then, a cached package, and a fallback for good
where it cannot compile."""

import logging
import warnings

import pytest
import torch

from rllib_geppo.core.aot_step import AheadOfTimeStep, package_folder


def step_fn(scale: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return rows * scale + 1.0, (rows * rows).sum(0)


class Counted:
    """``step_fn``, counting its calls: the step before (and instead of) the compiled one."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *tensors):
        self.calls += 1
        return step_fn(*tensors)


def test_packages_are_kept_under_inductors_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert package_folder() == tmp_path / "geppo_aot"


def test_a_step_compiled_ahead_of_time_gives_its_functions_results_and_is_cached(tmp_path, monkeypatch):
    # Its own package folder (inductor's caches stay where they are, so a rerun compiles faster).
    before = Counted()
    step = AheadOfTimeStep(step_fn, before, compile_after=2, dynamic=1, key="test", folder=tmp_path)
    scale = torch.tensor([1.0, -2.0, 0.5])
    for _ in range(2):
        step(scale, torch.randn(7, 3))
    assert before.calls == 2 and not step.compiled
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in (7, 5, 130):  # the rows are dynamic: one package serves them all
            x = torch.randn(rows, 3)
            for got, expected in zip(step(scale, x), step_fn(scale, x), strict=True):
                torch.testing.assert_close(got, expected)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]  # torch's, about itself
    assert step.compiled and before.calls == 2
    assert [p.name for p in tmp_path.iterdir()] == [step.package_path((scale, x)).name]

    # Another step of the same function and inputs loads the package: nothing is exported again.
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: pytest.fail("exported again"))
    again = AheadOfTimeStep(step_fn, Counted(), compile_after=0, dynamic=1, key="test", folder=tmp_path)
    torch.testing.assert_close(again(scale, x)[1], step_fn(scale, x)[1])
    assert again.compiled


def data_dependent(scale: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if rows.sum() > 0:  # a branch on the data: torch.export cannot trace it
        return (rows * scale,)
    return (rows,)


def test_a_step_that_cannot_compile_leaves_the_step_before_for_good(tmp_path, caplog):
    before = Counted()
    step = AheadOfTimeStep(data_dependent, before, compile_after=0, dynamic=1, key="test", folder=tmp_path)
    with caplog.at_level(logging.WARNING, logger="rllib_geppo.core.aot_step"):
        for _ in range(3):
            step(torch.ones(3), torch.ones(4, 3))
    assert not step.compiled and before.calls == 3
    ours = [r.getMessage() for r in caplog.records if r.name == "rllib_geppo.core.aot_step"]
    assert len(ours) == 1 and "Could not compile GePPO's step ahead of time" in ours[0]  # one attempt
