"""What a user sees while training: known-harmless messages hidden, real errors shown, progress
toward the stop budget, the real results folder, and GePPO's scalars in TensorBoard's files."""

import io
import struct
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import ray.cloudpickle
from ray.tune.registry import register_env

from rllib_geppo.cli.console import BudgetReporter, _LineFilter, progress_line
from rllib_geppo.cli.main import main

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.usefixtures("no_ray")  # main() starts and stops its own Ray


#: Longer than the 300 characters a summary line once cut errors at.
LOST_MESH = "the simulator lost its mesh at step 300: " + "cell 17 has a negative volume; " * 12


class BrokenSimulator(gym.Wrapper):
    """Pendulum whose 300th step raises, as a crashing simulator would."""

    def __init__(self, config=None):
        super().__init__(gym.make("Pendulum-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 300:
            raise RuntimeError(LOST_MESH)
        return self.env.step(action)


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


RUN = """
geppo-pendulum:
  run: GePPO
  env: Pendulum-v1
  stop: {{num_env_steps_sampled_lifetime: 768}}
  config:
    train_batch_size_per_learner: 256
    num_epochs: 1
    num_env_runners: 1
broken:
  run: GePPO
  env: broken-simulator
  stop: {{num_env_steps_sampled_lifetime: 768}}
  config:
    train_batch_size_per_learner: 256
    num_epochs: 1
    num_env_runners: 0
"""


def event_tags(trial_dir: Path) -> set[str]:
    """Scalar tags in a trial's TensorBoard event file (TFRecord framing, tensorboardX protos)."""
    from tensorboardX.proto import event_pb2

    (path,) = trial_dir.glob("events.out.tfevents.*")
    data, tags, i = path.read_bytes(), set(), 0
    while i < len(data):
        (length,) = struct.unpack("<Q", data[i : i + 8])
        event = event_pb2.Event.FromString(data[i + 12 : i + 12 + length])
        tags |= {value.tag for value in event.summary.value}
        i += 12 + length + 4
    return tags


def test_a_run_is_quiet_shows_progress_and_errors_and_writes_tensorboard_files(tmp_path, capsys):
    register_env("broken-simulator", BrokenSimulator)
    (tmp_path / "run.yaml").write_text(RUN.format())
    code = main(["train", "file", str(tmp_path / "run.yaml"), "--storage-path", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    console = out + err
    assert code == 1  # the broken trial failed
    for noise in (
        "on the new API stack!",
        "RLModuleConfig object",
        "constructor arguments in the object store",
        "Install gputil",
        "Token authentication",
    ):
        assert noise not in console, noise
    # A real error reaches the user: the failed trial's summary line ends with its message.
    (summary,) = [line for line in console.splitlines() if line.startswith("  broken_") and ": ERROR" in line]
    assert f"env.step() failed with RuntimeError: {LOST_MESH}. Fix the environment" in summary, summary
    assert f", error {tmp_path / 'r' / 'run'}/broken_" in summary and summary.endswith("/error.txt"), summary
    assert f"Results: {tmp_path / 'r' / 'run'}" in console
    assert "Progress: env steps" in console
    # Tune's tables name the trials' folders under the storage path, not Tune's staging folder in
    # Ray's session directory (which Ray's own warnings, e.g. of a nearly full disk, may still name).
    assert "Result logdir" not in console
    error_rows = [line for line in console.splitlines() if line.startswith("|") and "error.txt" in line]
    assert error_rows and all(str(tmp_path / "r" / "run") in row for row in error_rows), error_rows
    (trial_dir,) = (tmp_path / "r" / "run").glob("geppo-pendulum_*")
    tags = event_tags(trial_dir)
    for key in (
        "env_runners/episode_return_mean",
        "learners/default_policy/tv",
        "learners/default_policy/tv_target",
        "learners/default_policy/policy_lr",
        "learners/default_policy/clip_fraction",
        "learners/default_policy/effective_sample_size",
    ):
        assert f"ray/tune/{key}" in tags, key
