"""What a user sees while training, piece by piece: the filter that hides known-harmless
messages, and the progress line. A real run's console is tests/cli/test_cli.py's."""

import io

from rllib_geppo.cli.console import BudgetReporter, _LineFilter, progress_line


def test_line_filter_drops_known_noise_and_keeps_the_rest():
    out = io.StringIO()
    stream = _LineFilter(out)
    stream.write(
        "(GePPO pid=1) WARNING -- You are running GePPO on the new API stack! This is the new "
        "default behavior for this algorithm.\nreal warning: reward scale"
    )
    stream.write(
        " is 0\n(pid=2) core_worker.cc: Actor ... has constructor arguments in the object store "
        "and max_restarts > 0.\nTraceback (most recent call last):\n"
    )
    stream.write("Resume experiment with: tune.run_experiments(..., resume=True)\n")  # Tune's, on a stop
    stream.flush()
    assert out.getvalue() == "real warning: reward scale is 0\nTraceback (most recent call last):\n"


def test_progress_line_adds_up_trials_and_estimates_the_time_left():
    budget = {"num_env_steps_sampled_lifetime": 200_000.0}
    line = progress_line(
        [
            ({"num_env_steps_sampled_lifetime": 88_064.0}, budget, False),
            ({"num_env_steps_sampled_lifetime": 200_000.0}, budget, True),
        ],
        elapsed_s=360,
    )
    # 288,064 of 400,000 = 72%; 360 s for 72% leaves 360 * 0.28 / 0.72 = 140 s.
    assert line == "Progress: env steps 288,064 / 400,000 (72%), about 2 min 20 s left"
    # A trial stops at the budget it reaches first: here its iterations.
    both = {"num_env_steps_sampled_lifetime": 200_000.0, "training_iteration": 10.0}
    line = progress_line(
        [({"num_env_steps_sampled_lifetime": 2048.0, "training_iteration": 5.0}, both, False)], 30
    )
    assert line == "Progress: iterations 5 / 10 (50%), about 30 s left"
    # A resumed run had done 40% when it started: 10% more in 30 s leaves 50% in 150 s.
    line = progress_line(
        [({"num_env_steps_sampled_lifetime": 2048.0, "training_iteration": 5.0}, both, False)],
        30,
        start_fraction=0.4,
    )
    assert line == "Progress: iterations 5 / 10 (50%), about 2 min 30 s left"
    assert progress_line([({"training_iteration": 4.0}, both, False)], 30, 0.4) == (
        "Progress: iterations 4 / 10 (40%)"  # no progress since the start: no estimate
    )


class _Trial:
    """What BudgetReporter reads of a Tune trial: its name, status and last result."""

    def __init__(self, name: str, steps: float, status: str = "RUNNING"):
        self.name, self.status = name, status
        self.last_result = {"num_env_steps_sampled_lifetime": steps}

    def __str__(self) -> str:
        return self.name


def test_a_resumed_runs_time_left_counts_only_the_progress_since_it_started(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("rllib_geppo.cli.console.time.time", lambda: clock[0])
    stop = {"num_env_steps_sampled_lifetime": 1000}
    reporter = BudgetReporter(results_dir="results/run", stops={"sweep": stop, "sweep-wide": stop})
    # Restored at 600 and 200 of 1,000 env steps (40%); 60 s later at 700 and 300 (50%): 10% a
    # minute leaves 5 min, where counting from zero would say 1 min.
    trials = [_Trial("sweep_abcde_00000", 600), _Trial("sweep-wide_abcde_00001", 200)]
    assert reporter._progress(trials) == "Progress: env steps 800 / 2,000 (40%)"
    clock[0] += 60
    trials[0].last_result["num_env_steps_sampled_lifetime"] = 700
    trials[1].last_result["num_env_steps_sampled_lifetime"] = 300
    assert reporter._progress(trials) == "Progress: env steps 1,000 / 2,000 (50%), about 5 min 0 s left"
