"""The command line (:mod:`rllib_geppo.report.main`): malformed options are usage errors, and a
real Tune run's folders make a report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from report_helpers import as_float, assert_png, read_rows, run_cli, write_results

# ----------------------------------------------------------------------------- usage errors


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table of
    :func:`report_helpers.write_results`."""
    return write_results(tmp_path)


@pytest.mark.parametrize("target", ["Hopper-v5", "Hopper-v5=many", "=1100", "Hopper-v5=nan"])
def test_a_malformed_target_is_a_usage_error(results: Path, capsys, target: str):
    with pytest.raises(SystemExit):
        run_cli(results, "--target", target)
    assert f"expected ENV=RETURN (e.g. Hopper-v5=2500), got {target!r}" in capsys.readouterr().err


def test_a_malformed_pool_is_a_usage_error(tmp_path: Path, capsys):
    with pytest.raises(SystemExit):
        run_cli(tmp_path, "--pool", "split")
    assert "expected LABEL=VARIANT" in capsys.readouterr().err


NO_TABULATE = """
import sys
sys.modules["tabulate"] = None  # importing it now raises ImportError
from rllib_geppo.cli.main import main
raise SystemExit(main(["report", sys.argv[1]]))
"""


def test_missing_tabulate_says_how_to_install_it(results: Path):
    """pandas writes the markdown tables with tabulate, which the report extra installs."""
    out = subprocess.run(
        [sys.executable, "-c", NO_TABULATE, str(results)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stderr
    assert "the report command needs 'tabulate': pip install -e '.[report]' from a checkout" in out.stderr


# ----------------------------------------------------------------------------- a real Tune run


@pytest.mark.filterwarnings("ignore::UserWarning")  # gymnasium's Pendulum env checker
def test_report_reads_a_real_tune_run(local_ray, tmp_path: Path):
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig

    """A 2 lr x 2 seed sweep: two rows of two seeds, nothing else in Tune's records told apart."""
    batch = 256
    config = (
        PPOConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .training(
            train_batch_size_per_learner=batch,
            minibatch_size=64,
            num_epochs=1,
            lr=tune.grid_search([1e-4, 1e-3]),
        )
        .debugging(seed=tune.grid_search([0, 1]))
    )
    tuner = tune.Tuner(
        "PPO",
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path / "results"), name="pendulum", stop={"training_iteration": 2}, verbose=0
        ),
    )
    assert not tuner.fit().errors
    out = tmp_path / "out"
    assert run_cli(tmp_path / "results", "--out", out) == 0
    rows = read_rows(out)
    assert set(rows) == {("Pendulum-v1", "RLlib PPO lr=0.0001"), ("Pendulum-v1", "RLlib PPO lr=0.001")}
    for row in rows.values():
        assert (as_float(row, "seeds"), as_float(row, "budget")) == (2, 2 * batch)
        assert np.isfinite(as_float(row, "final")) and as_float(row, "env_steps_per_s") > 0
    assert "n/a" in (out / "table.md").read_text()  # no GePPO-code PPO baseline in this run
    assert_png(out / "returns.png")
    assert not (out / "tv.png").exists()  # RLlib's PPO logs no TV
    # The trials' records (--keep-trials) make the same report as Tune's folders.
    kept, again = tmp_path / "kept", tmp_path / "again"
    assert run_cli(tmp_path / "results", "--out", tmp_path / "out-kept", "--keep-trials", kept) == 0
    assert len(list(kept.glob("*/result.json.gz"))) == 4
    assert run_cli(kept, "--out", again) == 0
    for name in ("table.csv", "trials.csv", "stability.csv"):
        assert (again / name).read_text() == (out / name).read_text()
