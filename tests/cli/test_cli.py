"""`rllib train file`: real runs through the console script, dry runs, exit code 2 for bad input.

Training runs start their own local Ray in a subprocess; everything else runs main() in-process
and must not start Ray at all.
"""

import csv
import json
import math
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import ray
import yaml
from ray.tune import ExperimentAnalysis

from rllib_geppo.cli.main import main
from rllib_geppo.cli.outcomes import actor_lost, exit_status
from rllib_geppo.cli.resume import complete_checkpoints
from rllib_geppo.cli.stranded import StrandedTrials, shortfall
from rllib_geppo.records.checkpoint_manifest import write_manifest
from rllib_geppo.records.trial_record import experiment_of

from envs import TupleActionEnv
from helpers import REPO

pytestmark = pytest.mark.usefixtures("no_ray")  # main() starts and stops its own Ray

# The tuned examples, and the files that made the studies under docs/results.
TUNED_EXAMPLES = sorted((REPO / "tuned_examples").glob("*.yaml")) + sorted((REPO / "docs").rglob("*.yaml"))
RLLIB = Path(sys.executable).with_name("rllib")  # the console script installed with the package

# Two experiments, two algorithms, one Tune run: 3 iterations of 128 Pendulum steps each on one
# env. The 200-step episodes end in the second iteration only, so the first and last report no
# return.
TINY = """
geppo:
  run: GePPO
  env: Pendulum-v1
  stop: {training_iteration: 3}
  config: &config
    train_batch_size_per_learner: 128
    num_epochs: 1
    num_env_runners: 0
    num_envs_per_env_runner: 1
rllib-ppo:
  run: PPO
  env: Pendulum-v1
  stop: {training_iteration: 3}
  config:
    <<: *config
    minibatch_size: 64
"""

# The run that the tests below `tiny_run` read: each way a trial ends in a run that finishes, on
# both API stacks. Its experiments:
# - "geppo" and "rllib-ppo", TINY's, stopped on env steps (384: 3 iterations); GePPO's env is a
#   gymnasium id and PPO's a Tune name, both registered by a module beside the file that
#   --import names (the id only in the processes that import it);
# - "broken", a class path to a module beside the file, whose 300th step raises (iteration 3);
# - "nothing-sampled", whose every step raises on its one remote EnvRunner, restarted (its start
#   makes Ray's known-harmless messages); its one iteration ends before GePPO's
#   max_failed_samples_in_a_row (3) would stop the run;
# - "old-stack", GePPO on RLlib's old API stack, evaluated in its last iteration (the command's
#   -c overrides reach every experiment).
TINY_RUN = (
    TINY.replace("{training_iteration: 3}", "{num_env_steps_sampled_lifetime: 384}")
    .replace("env: Pendulum-v1", "env: PendulumByImport-v0", 1)
    .replace("env: Pendulum-v1", "env: pendulum-by-name", 1)
    + """broken:
  run: GePPO
  env: broken_simulator.BrokenSimulator
  stop: {num_env_steps_sampled_lifetime: 384}
  config: *config
nothing-sampled:
  run: GePPO
  env: broken_simulator.BrokenCartPole
  stop: {training_iteration: 1}
  config:
    train_batch_size_per_learner: 64
    num_epochs: 1
    num_env_runners: 1
    delay_between_env_runner_restarts_s: 0
old-stack:
  run: GePPO
  env: Pendulum-v1
  stop: {training_iteration: 2}
  config:
    <<: *config
    enable_rl_module_and_learner: false
    enable_env_runner_and_connector_v2: false
"""
)
assert TINY_RUN.count("num_env_steps_sampled_lifetime: 384") == 3
assert "env: PendulumByImport-v0" in TINY_RUN and "env: pendulum-by-name" in TINY_RUN

# Imported with --import: in the command and in every Ray worker, before the trials make envs.
# Tune's names travel with the Ray session; gymnasium's ids stay in the process that registers them.
REGISTRATIONS = """
import gymnasium as gym
from ray import tune

gym.register("PendulumByImport-v0", "gymnasium.envs.classic_control:PendulumEnv", max_episode_steps=200)
tune.register_env("pendulum-by-name", lambda config: gym.make("Pendulum-v1"))
"""

#: Longer than the 300 characters a summary line once cut errors at.
LOST_MESH = "the simulator lost its mesh at step 300: " + "cell 17 has a negative volume; " * 12

BROKEN_SIMULATOR = f'''
import gymnasium as gym


class BrokenSimulator(gym.Wrapper):
    """Pendulum whose 300th step raises, as a crashing simulator would."""

    def __init__(self, config=None):
        super().__init__(gym.make("Pendulum-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 300:
            raise RuntimeError({LOST_MESH!r})
        return self.env.step(action)


class BrokenCartPole(gym.Wrapper):
    """CartPole whose every step raises."""

    def __init__(self, config=None):
        super().__init__(gym.make("CartPole-v1"))

    def step(self, action):
        raise RuntimeError("the simulator is broken")
'''

GRID = """
sweep:
  run: GePPO
  stop: {num_env_steps_sampled_lifetime: 1e6}
  num_samples: 2
  config:
    env: {grid_search: [Pendulum-v1, MountainCarContinuous-v0]}
    seed: {grid_search: [0, 1, 2]}
    lr: 3e-4
"""


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def dry_run(capsys, *argv: str) -> dict:
    """main(train file ... --dry-run) in-process; returns the printed YAML."""
    assert main(["train", "file", *argv, "--dry-run"]) == 0, capsys.readouterr().err
    assert not ray.is_initialized()
    return yaml.safe_load(capsys.readouterr().out)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """TINY_RUN through the console script, run from another folder, with an evaluation every
    second iteration (its keys first appear in iteration 2); the storage path and the finished
    command. The modules beside the file reach the trials in Ray's workers only if the command
    ships them (without them the trials fail with RLlib's error)."""
    folder, elsewhere = tmp_path_factory.mktemp("tiny"), tmp_path_factory.mktemp("elsewhere")
    (folder / "broken_simulator.py").write_text(BROKEN_SIMULATOR)
    (folder / "registrations.py").write_text(REGISTRATIONS)
    yaml_file = write(folder, TINY_RUN, "tiny.yaml")
    overrides = ["evaluation_interval=2", "evaluation_duration=1", "evaluation_duration_unit=episodes"]
    proc = subprocess.run(
        [str(RLLIB), "train", "file", str(yaml_file), "--import", "registrations"]
        + ["--storage-path", str(folder / "results")]
        + [arg for override in overrides for arg in ("-c", override)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,  # five trials, on as few as 2 CPUs
    )
    return folder / "results", proc


def summary_line(proc: subprocess.CompletedProcess, experiment: str) -> str:
    """The line of the run's closing summary for the experiment's one trial."""
    lines = proc.stdout.split("\nSummary:\n")[1].splitlines()
    (line,) = [line for line in lines if line.startswith(f"  {experiment}_")]
    return line


def trial_results(results_dir: Path, experiment: str) -> tuple[Path, list[dict]]:
    """The experiment's one trial in `tiny_run`'s run: its folder and its result.json rows."""
    (trial_dir,) = (results_dir / "tiny").glob(f"{experiment}_*")
    return trial_dir, [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]


def test_train_file_writes_results_and_checkpoints(tiny_run):
    """TINY's two trials finish (their envs registered by --import, in the trial's process
    too), with Tune's files, checkpoints and a summary line each."""
    results_dir, proc = tiny_run
    assert proc.returncode == 1, proc.stderr[-3000:]  # two trials failed ("broken", "nothing-sampled")
    for experiment in ("geppo", "rllib-ppo"):
        # All experiments land in one run directory (results/<file stem>), with all Tune files.
        trial_dir, results = trial_results(results_dir, experiment)
        assert [r["training_iteration"] for r in results] == [1, 2, 3]
        returns = [r["env_runners"].get("episode_return_mean", math.nan) for r in results]
        assert math.isnan(returns[0]) and math.isfinite(returns[1]) and math.isnan(returns[2])
        assert (trial_dir / "params.json").is_file()
        with (trial_dir / "progress.csv").open(newline="") as f:
            rows = list(csv.DictReader(f))
        evaluated = [row["evaluation/env_runners/episode_return_mean"] for row in rows]
        assert evaluated[0] in ("", "nan")  # before the first evaluation
        assert math.isfinite(float(evaluated[1]))  # the late column kept, with its value
        assert [int(row["training_iteration"]) for row in rows] == [1, 2, 3]
        assert list(trial_dir.glob("checkpoint_*/algorithm_state.pkl"))
        summary = summary_line(proc, experiment)
        assert "TERMINATED" in summary and "env steps 384" in summary
        # The best return skips iterations without one (Tune's own max is NaN after them).
        assert f"best return {returns[1]:.2f}" in summary
        assert f"checkpoint {trial_dir}/checkpoint_" in summary


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


def test_a_run_is_quiet_shows_progress_and_errors_and_writes_tensorboard_files(tiny_run):
    """What a user sees while training: known-harmless messages hidden, real errors shown,
    progress toward the stop budgets, the real results folder, GePPO's scalars in TensorBoard."""
    results_dir, proc = tiny_run
    assert proc.returncode == 1, proc.stderr[-3000:]  # two trials failed
    console, run_dir = proc.stdout + proc.stderr, results_dir / "tiny"
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
    assert f", error {run_dir}/broken_" in summary and summary.endswith("/error.txt"), summary
    assert f"Results: {run_dir}" in console
    assert "% of the stop budgets" in console  # two kinds of budget: env steps and iterations
    # Tune's tables name the trials' folders under the storage path, not Tune's staging folder in
    # Ray's session directory (which Ray's own warnings, e.g. of a nearly full disk, may still name).
    assert "Result logdir" not in console
    error_rows = [line for line in console.splitlines() if line.startswith("|") and "error.txt" in line]
    assert error_rows and all(str(run_dir) in row for row in error_rows), error_rows
    (trial_dir,) = run_dir.glob("geppo_*")
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


def test_a_trial_that_sampled_no_env_step_has_failed(tiny_run):
    """Its one iteration ended without error, on no env step: the summary and the exit status
    call it what it is."""
    results_dir, proc = tiny_run
    line = summary_line(proc, "nothing-sampled")
    assert ": ERROR, " in line and "env steps 0" in line
    assert "it sampled no env step: every sample failed" in line
    assert "RuntimeError: the simulator is broken" in proc.stdout + proc.stderr  # the EnvRunner's error
    # The exit status reads the same status: 1 for this trial alone, as for one that raised.
    trials = {experiment_of(str(t)): t for t in ExperimentAnalysis(str(results_dir / "tiny")).trials}
    assert trials["nothing-sampled"].status == "TERMINATED"  # Tune's status
    assert exit_status("resume", [trials["nothing-sampled"]], None, None) == 1
    assert exit_status("resume", [trials["geppo"], trials["old-stack"]], None, None) == 0


def test_the_old_api_stack_trains_from_the_command_line(tiny_run):
    """GePPO's old-stack trial trains, evaluates and ends with a checkpoint."""
    results_dir, proc = tiny_run
    line = summary_line(proc, "old-stack")
    assert ": TERMINATED, " in line and "checkpoint " in line, line
    _, results = trial_results(results_dir, "old-stack")
    assert [r["training_iteration"] for r in results] == [1, 2]
    stats = [r["info"]["learner"]["default_policy"]["learner_stats"] for r in results]
    assert [s["num_policies"] for s in stats] == [1, 2] and all(math.isfinite(s["tv"]) for s in stats)
    assert math.isfinite(results[1]["evaluation"]["env_runners"]["episode_return_mean"])


def test_python_m_dry_run_resolves_grid_search(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rllib_geppo",
            "train",
            "file",
            str(write(tmp_path, GRID)),
            "--dry-run",
            "--storage-path",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    trials = yaml.safe_load(proc.stdout)["sweep"]["trials"]
    # 2 envs x 3 seeds x num_samples 2, every trial fully resolved.
    assert len(trials) == 12
    envs = ("Pendulum-v1", "MountainCarContinuous-v0")
    expected = [(env, seed) for env in envs for seed in (0, 1, 2) for _ in range(2)]
    assert sorted((t["env"], t["seed"]) for t in trials) == sorted(expected)
    assert all(t["lr"] == 3e-4 for t in trials)  # `3e-4` is a float, not YAML 1.1's string
    assert not (tmp_path / "results").exists()


def test_overrides_reach_nested_keys_stop_and_num_samples(tmp_path, capsys):
    out = dry_run(
        capsys,
        str(write(tmp_path, GRID)),
        "-c",
        "model_config.fcnet_hiddens=[8, 8]",
        "-c",
        "seed=7",
        "--stop",
        "training_iteration=3",
        "--num-samples",
        "1",
    )["sweep"]
    assert out["stop"] == {"num_env_steps_sampled_lifetime": 1e6, "training_iteration": 3}
    assert [t["seed"] for t in out["trials"]] == [7, 7]
    assert all(t["model_config"] == {"fcnet_hiddens": [8, 8]} for t in out["trials"])


def test_experiment_option_selects_experiments(capsys):
    out = dry_run(capsys, str(REPO / "tuned_examples" / "geppo_mujoco.yaml"), "-e", "geppo-ant")
    assert list(out) == ["geppo-ant"] and out["geppo-ant"]["num_trials"] == 5


def test_a_pattern_selects_figure_2s_experiments_with_the_policy_alone_wide(capsys):
    out = dry_run(capsys, str(REPO / "tuned_examples" / "wide_networks.yaml"), "-e", "walker2d-*")
    assert list(out) == [
        "walker2d-geppo",
        "walker2d-ppo",
        "walker2d-ppo-adapt",
        "walker2d-geppo-wide",
        "walker2d-ppo-wide",
        "walker2d-ppo-adapt-wide",
    ]
    for name, experiment in out.items():
        assert sorted(t["seed"] for t in experiment["trials"]) == [0, 1, 2, 3, 4]
        for trial in experiment["trials"]:
            assert trial.get("sample_reuse", True) == ("geppo" in name)
            assert trial.get("adaptive_lr", True) == ("ppo-adapt" in name or "geppo" in name)
            assert trial.get("model_config") == (
                {"fcnet_hiddens": [400, 300], "vf_fcnet_hiddens": [64, 64]} if "wide" in name else None
            )


def test_the_appendix_runs_every_variant_of_the_other_tasks_with_table_1s_task_settings(capsys):
    wide = dry_run(
        capsys,
        str(REPO / "tuned_examples" / "wide_networks.yaml"),
        "-e",
        "swimmer-*",
        "-e",
        "ant-*",
        "-e",
        "humanoid-*",
    )
    table1 = dry_run(capsys, str(REPO / "tuned_examples" / "table1.yaml"))
    variants = ["geppo", "ppo", "ppo-adapt", "geppo-wide", "ppo-wide", "ppo-adapt-wide"]
    assert list(wide) == [f"{task}-{v}" for task in ("swimmer", "ant", "humanoid") for v in variants]
    for name, experiment in wide.items():
        task, variant = name.split("-", 1)
        (paper,) = {
            (t["env"], t.get("lr"), t.get("init_std_multiple")) for t in table1[f"geppo-{task}"]["trials"]
        }
        for trial in experiment["trials"]:
            assert (trial["env"], trial.get("lr"), trial.get("init_std_multiple")) == paper
            assert trial.get("sample_reuse", True) == variant.startswith("geppo")
            assert trial.get("adaptive_lr", True) == (variant != "ppo" and variant != "ppo-wide")
            assert ("model_config" in trial) == variant.endswith("wide")
        assert sorted(t["seed"] for t in experiment["trials"]) == [0, 1, 2]


@pytest.mark.parametrize("path", TUNED_EXAMPLES, ids=lambda p: p.name)
def test_tuned_examples_pass_dry_run(path, capsys):
    out = dry_run(capsys, str(path))
    assert out and all(e["num_trials"] >= 1 for e in out.values())
    assert path.read_text().startswith("# ")  # says what it reproduces and how long it takes


def test_mujoco_examples_cover_the_paper(capsys):
    geppo = dry_run(capsys, str(REPO / "tuned_examples" / "geppo_mujoco.yaml"))
    ppo = dry_run(capsys, str(REPO / "tuned_examples" / "ppo_mujoco.yaml"))
    envs = {"Swimmer-v5", "Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"}
    for suite in (geppo, ppo):  # 5 seeds x 1M steps for each task
        for experiment in suite.values():
            assert experiment["stop"] == {"num_env_steps_sampled_lifetime": 1_000_000}
            assert sorted(t["seed"] for t in experiment["trials"]) == [0, 1, 2, 3, 4]
        assert {t["env"] for e in suite.values() for t in e["trials"]} == envs
    by_env = {t["env"]: t for e in geppo.values() for t in e["trials"]}
    assert (by_env["Ant-v5"]["lr"], by_env["Ant-v5"]["init_std_multiple"]) == (1e-4, 0.5)
    assert (by_env["Humanoid-v5"]["lr"], by_env["Humanoid-v5"]["init_std_multiple"]) == (3e-5, 0.5)
    assert (by_env["Hopper-v5"]["lr"], by_env["Hopper-v5"]["init_std_multiple"]) == (3e-4, 1.0)
    assert {e["run"] for e in ppo.values()} == {"GePPO", "PPO"}
    geppo_as_ppo = [t for e in ppo.values() if e["run"] == "GePPO" for t in e["trials"]]
    assert len(geppo_as_ppo) == 30 and not any(t["sample_reuse"] for t in geppo_as_ppo)


# case -> (YAML text, or None for a missing file; extra arguments; substrings of the message)
BAD_INPUT = {
    "missing file": (None, [], ["no such file"]),
    "yaml syntax": ("exp:\n  run: PPO\n  stop: {a: 1\n", [], ["exp.yaml:4:1", "YAML syntax error"]),
    "yaml tag": (
        "exp:\n  run: !!python/name:os.system PPO\n",
        [],
        ["exp.yaml:2:8", "YAML tag not allowed", "remove the tag"],
    ),
    "unknown algorithm": (
        TINY.replace("run: GePPO", "run: GePPPO"),
        [],
        ["'geppo'", "unknown algorithm", "Did you mean 'GePPO'"],
    ),
    "unknown config key": (
        TINY.replace("num_epochs: 1", "num_epoch: 1"),
        [],
        ["config key 'num_epoch'", "Did you mean 'num_epochs'"],
    ),
    "misspelt lambda": (
        TINY.replace("num_epochs: 1", "lamda: 0.9"),
        [],
        ["config key 'lamda'", "not a setting of GePPO", "Did you mean 'lambda'"],
    ),
    "wrong value type": (
        TINY,
        ["-c", "num_epochs=two"],
        ["--config num_epochs=two", "expected a number", "got string 'two'"],
    ),
    "rllib rejects value": (TINY, ["-c", "gamma=1.5"], ["rejects the config", "gamma"]),
    "stop key never reported": (
        TINY.replace("training_iteration", "timesteps_total"),
        [],
        ["stop key 'timesteps_total'", "never reports", "Use 'num_env_steps_sampled_lifetime'"],
    ),
    "renamed stop key": (
        TINY,
        ["--stop", "env_runners/episode_reward_mean=-200"],
        ["Use 'env_runners/episode_return_mean'"],
    ),
    "unknown env": (
        TINY.replace("Pendulum-v1", "Pendulum-v2"),
        [],
        ["no such environment", "Did you mean 'Pendulum-v1'"],
    ),
    "old-stack model key": (TINY, ["-c", "model={hidden: 8}"], ["'model'", "model_config"]),
    "retired experiment key": (
        TINY.replace("  stop:", "  checkpoint_freq: 5\n  stop:", 1),
        [],
        ["'checkpoint_freq'", "checkpoint_config: {checkpoint_frequency: N}"],
    ),
    "override without =": (TINY, ["-c", "lr"], ["--config lr", "expected KEY=VALUE"]),
    "max_failures not a count": (
        TINY.replace("  stop:", "  max_failures: many\n  stop:", 1),
        [],
        ["'max_failures': expected an integer >= -1", "-1: always", "got string 'many'"],
    ),
    "unknown experiment": (TINY, ["-e", "gepo"], ["no experiment 'gepo'", "Did you mean 'geppo'"]),
}


@pytest.mark.parametrize("case", BAD_INPUT, ids=str)
def test_bad_input_exits_2_with_one_message(case, tmp_path, capsys):
    text, argv, expected = BAD_INPUT[case]
    path = write(tmp_path, text) if text is not None else tmp_path / "exp.yaml"
    assert main(["train", "file", str(path), *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("rllib: error: ")
    assert str(path) in err or "--" in err  # names the file, or the option that set the value
    for text in expected:
        assert text in err


def test_bad_input_exits_2_from_the_console_script(tmp_path):
    yaml_file = write(tmp_path, TINY.replace("num_epochs: 1", "lrr: 1"))
    proc = subprocess.run(
        [str(RLLIB), "train", "file", str(yaml_file)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"rllib: error: {yaml_file}: experiment 'geppo', config key 'lrr': not a setting of GePPO. "
        "Did you mean 'lr'? Fix the spelling or remove the key."
    ]


def test_report_subcommand_is_wired(capsys):
    assert main(["report", "--help"]) == 0
    assert "--out" in capsys.readouterr().out


def run_exits_2_before_ray_starts(capsys, *argv: str) -> str:
    """main(train file ...) without --dry-run: exit code 2, Ray never started; the message."""
    assert main(["train", "file", *argv]) == 2
    assert not ray.is_initialized()
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("rllib: error: "), err
    return err


def test_unsupported_spaces_exit_2_before_ray_starts(tmp_path, capsys):
    path = write(tmp_path, TINY.replace("Pendulum-v1", "envs.TupleActionEnv"))
    err = run_exits_2_before_ray_starts(capsys, str(path), "-e", "geppo")
    assert (
        f"{path}: experiment 'geppo': GePPO rejects the config: 'envs.TupleActionEnv': "
        "GePPO's RLModule supports flat Box (Gaussian), Discrete, MultiDiscrete and MultiBinary" in err
    )
    assert "Nested (Tuple, Dict) and multi-dimensional actions are not supported" in err
    # RLlib's PPO is not refused; Blackjack's Tuple observations are flattened for GePPO.
    assert main(["train", "file", str(path), "-e", "rllib-ppo", "--dry-run"]) == 0
    blackjack = write(tmp_path, TINY.replace("Pendulum-v1", "Blackjack-v1"), "blackjack.yaml")
    assert main(["train", "file", str(blackjack), "-e", "geppo", "--dry-run"]) == 0


def no_choice(nvec: list[int]) -> gym.spaces.MultiDiscrete:
    """A MultiDiscrete of ``nvec``, which may hold a 0 (gymnasium refuses it when made, not
    when changed)."""
    space = gym.spaces.MultiDiscrete([2] * len(nvec))
    space.nvec = np.array(nvec, np.int64)
    return space


class NoEntries(TupleActionEnv):
    action_space = no_choice([])


class ZeroChoices(TupleActionEnv):
    action_space = no_choice([2, 0])


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            "NoEntries",
            "the action space MultiDiscrete([]) has no entries: there is no action to choose. "
            "Fix: give it at least one entry",
        ),
        (
            "ZeroChoices",
            "entry 1 of the action space MultiDiscrete([2 0]) has 0 choices: a categorical "
            "policy cannot choose among none. Fix: give every entry at least one choice",
        ),
    ],
)
def test_a_multi_discrete_without_choices_exits_2_before_ray_starts(tmp_path, capsys, env, message):
    path = write(tmp_path, TINY.replace("Pendulum-v1", f"{__name__}.{env}"))
    assert message in run_exits_2_before_ray_starts(capsys, str(path), "-e", "geppo")


def test_a_trial_larger_than_the_machine_exits_2_before_ray_starts(tmp_path, capsys):
    cpus = os.cpu_count()
    err = run_exits_2_before_ray_starts(
        capsys, str(write(tmp_path, TINY)), "-e", "geppo", "-c", f"num_env_runners={cpus}"
    )
    assert (
        f"a trial asks for {cpus + 1} CPUs (num_env_runners: {cpus}), but this machine has {cpus} CPU" in err
    )
    assert "lower num_env_runners" in err


def test_evaluation_settings_are_among_those_behind_a_trials_request(tmp_path, capsys):
    # Trials that differ in evaluation_interval are checked apart, and the message names it.
    cpus = os.cpu_count()
    err = run_exits_2_before_ray_starts(
        capsys,
        str(write(tmp_path, TINY)),
        "-e",
        "geppo",
        "-c",
        "evaluation_interval={grid_search: [0, 1]}",
        "-c",
        f"evaluation_num_env_runners={cpus}",
    )
    assert (
        f"a trial asks for {cpus + 1} CPUs (num_env_runners: 0, evaluation_interval: 0, "
        f"evaluation_num_env_runners: {cpus})" in err
    )


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_address_exits_2_with_one_message(tmp_path, capsys, monkeypatch):
    port = unused_port()  # free once closed: nothing listens there
    path = str(write(tmp_path, TINY))
    err = run_exits_2_before_ray_starts(capsys, path, "--address", f"127.0.0.1:{port}")
    assert f"--address 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} (connection refused)" in err
    # `auto` follows RAY_ADDRESS, as ray.init does.
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    err = run_exits_2_before_ray_starts(capsys, path, "--address", "auto")
    assert "--address auto (" in err and f":{port}): nothing answers at " in err


def test_resume_of_an_unknown_run_exits_2_listing_the_runs(tmp_path, capsys):
    path = str(write(tmp_path, TINY))
    storage = tmp_path / "results"
    err = run_exits_2_before_ray_starts(
        capsys, path, "--storage-path", str(storage), "--resume", "--name", "nope"
    )
    assert f"--resume: no run 'nope' in {storage}. There are no runs there" in err
    for run in ("older", "newer"):  # what Tune leaves in a run's folder
        (storage / run).mkdir(parents=True)
        (storage / run / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    (storage / "not-a-run").mkdir()
    err = run_exits_2_before_ray_starts(
        capsys, path, "--storage-path", str(storage), "--resume", "--name", "nope"
    )
    assert "Runs there: newer, older; pass one with --name" in err


def test_a_second_run_into_a_folder_in_use_exits_2(tmp_path, capsys):
    path = str(write(tmp_path, TINY))
    run_dir = tmp_path / "results" / "exp"
    run_dir.mkdir(parents=True)
    # Another process holds the folder's lock, as a running run does.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import fcntl, sys, time\n"
                f"f = open({str(run_dir / '.rllib_geppo_run.lock')!r}, 'a+')\n"
                "fcntl.flock(f, fcntl.LOCK_EX); f.write('process 4242 on a host'); f.flush()\n"
                "print('locked', flush=True); time.sleep(120)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        err = run_exits_2_before_ray_starts(
            capsys, path, "-e", "geppo", "--storage-path", str(tmp_path / "results")
        )
        assert f"run folder {run_dir} is in use by another run (process 4242 on a host)" in err
        assert "Pass another --name" in err
    finally:
        holder.kill()
        holder.wait()


def test_a_checkpoint_without_a_manifest_is_cut_short_only_after_the_first_with_one(tmp_path):
    """GePPO writes a checkpoint's manifest last; checkpoints from before 0.9 have none and stay."""
    folders = []
    for index, manifest in enumerate([False, True, False, True, False]):
        folder = tmp_path / f"checkpoint_{index:06d}"
        folder.mkdir()
        (folder / "algorithm_state.pkl").write_bytes(b"state")
        if manifest:
            write_manifest(folder, training_iteration=index)
        folders.append(folder)
    assert complete_checkpoints(folders) == [folders[0], folders[1], folders[3]]
    assert complete_checkpoints([folders[0], folders[2]]) == [folders[0], folders[2]]


def test_resume_of_a_run_whose_saved_state_is_cut_short_exits_2(tmp_path, capsys):
    # A full disk truncates Tune's experiment state: Tune would start the run over in silence.
    path = str(write(tmp_path, TINY))
    run_dir = tmp_path / "results" / "run"
    run_dir.mkdir(parents=True)
    state = run_dir / "experiment_state-2026-01-01_00-00-00.json"
    state.write_text('{"trial_data": [["{\\"stub\\": false, \\"trainable_name\\"')
    err = run_exits_2_before_ray_starts(
        capsys, path, "--storage-path", str(tmp_path / "results"), "--resume", "--name", "run"
    )
    assert f"--resume: the run's saved state {state} cannot be read (JSONDecodeError" in err
    assert "Tune would start the run over" in err


def test_resume_restores_the_trials_in_the_order_the_run_created_them(tmp_path):
    """Tune saves a run's trials in an arbitrary order, and a resumed run starts those that never
    ran in the saved order; the state is put in creation order first. Entries are Tune's own."""
    from ray.tune.experiment import Trial

    from rllib_geppo.private_ray import save_trials

    def order_as_created(run_dir: Path) -> bool:
        return save_trials(run_dir, finished={})

    def saved(*ids: str) -> list[list[str]]:
        return [list(Trial("__fake", trial_id=i, stub=True).get_json_state()) for i in ids]

    state = tmp_path / "experiment_state-2026-01-01_00-00-00.json"
    shuffled = saved(*(f"abcde_{i:05d}" for i in (3, 0, 11, 1, 2)))
    state.write_text(json.dumps({"trial_data": shuffled, "runner_data": {"kept": 1}}))
    assert order_as_created(tmp_path)
    restored = json.loads(state.read_text())
    assert [json.loads(e[0])["trial_id"][-2:] for e in restored["trial_data"]] == [
        "00",
        "01",
        "02",
        "03",
        "11",
    ]
    assert sorted(restored["trial_data"]) == sorted(shuffled)  # each entry as it was
    assert restored["runner_data"] == {"kept": 1}
    assert not order_as_created(tmp_path)  # in order already: nothing written
    custom = json.dumps({"trial_data": saved("abcde_00001", "my-trial")})
    state.write_text(custom)  # an ID without Tune's counter: the order stays as saved
    assert not order_as_created(tmp_path) and state.read_text() == custom


def test_resume_takes_the_experiment_patterns_it_started_with_and_refuses_others():
    from rllib_geppo.cli.experiment_file import UserError
    from rllib_geppo.cli.resume import SavedTrial, check_unchanged

    saved = [
        SavedTrial(name, {"lr": lr}, {"training_iteration": 9}, "RUNNING", name)
        for name, lr in (("walker2d-geppo", 3e-4), ("walker2d-ppo", 1e-4))
    ]
    check_unchanged(saved, ["walker2d-*"], [], [], None)
    check_unchanged(saved, ["walker2d-g*"], ["lr=3e-4"], [], None)  # the pattern selects geppo alone
    with pytest.raises(
        UserError, match=r"these would change them: -e hopper-\* \(not in the run\), -c lr=3e-4\."
    ):
        check_unchanged(saved, ["walker2d-*", "hopper-*"], ["lr=3e-4"], [], None)


def test_resume_reads_each_saved_trials_experiment_by_its_exact_name(tmp_path):
    """The trials of a saved state, named by this CLI's trial-name creator, are read back as of
    their experiment: `-e` with its exact name resumes, and its saved stop criteria show."""
    import functools

    from ray.tune.experiment import Trial

    from rllib_geppo.cli.resume import check_unchanged, saved_stops, saved_trials
    from rllib_geppo.cli.tune_run import _trial_name

    def saved(experiment: str, trial_id: str) -> list[str]:
        name = functools.partial(_trial_name, experiment)
        trial = Trial("__fake", stub=True, trial_id=trial_id, trial_name_creator=name, config={"seed": 0})
        trial.stopping_criterion = {"num_env_steps_sampled_lifetime": 1000}
        return list(trial.get_json_state())

    state = {
        "trial_data": [saved("walker2d-geppo", "5a060_00000"), saved("walker2d-geppo-wide", "5a060_00001")]
    }
    (tmp_path / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    trials = saved_trials(tmp_path)
    assert [t.experiment for t in trials] == ["walker2d-geppo", "walker2d-geppo-wide"]
    check_unchanged(trials, ["walker2d-geppo"], [], [], None)
    assert saved_stops(trials)["walker2d-geppo"] == {"num_env_steps_sampled_lifetime": 1000}


class _Trial:
    """What StrandedTrials reads of a Tune trial: its id, status and placement group."""

    def __init__(self, name: str, *bundles: dict[str, float]):
        from ray.tune.execution.placement_groups import PlacementGroupFactory

        self.trial_id, self.status = name, "PENDING"
        self.placement_group_factory = PlacementGroupFactory(list(bundles))

    def __str__(self) -> str:
        return self.trial_id


def test_a_trial_waiting_for_resources_the_cluster_lacks_is_named_once_per_wait(caplog):
    now = [0.0]
    watch = StrandedTrials(
        "rllib train file x.yaml --resume",
        wait_s=60,
        node_resources=lambda: [{"CPU": 2.0}, {"CPU": 2.0}],
        clock=lambda: now[0],
    )
    stranded, queued = _Trial("on-gpu", {"CPU": 1, "GPU": 1}), _Trial("queued", {"CPU": 2})
    trials = [stranded, queued]

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "rllib_geppo.cli.stranded"]

    with caplog.at_level("WARNING"):
        for now[0] in (0.0, 59.0):
            watch.on_step_end(0, trials)
        assert warnings() == []  # not yet: a cluster may be starting or scaling up
        for now[0] in (61.0, 80.0, 200.0):
            watch.on_step_end(0, trials)
        assert warnings() == [  # once, and not for the trial that only waits its turn
            "on-gpu has waited 61 s for 1 GPU; the cluster has 0 GPUs. It starts once a node "
            "that has them joins (an autoscaling cluster adds one; by hand: ray start --address "
            "<head> with the missing --num-cpus, --num-gpus or --resources). Or stop this run "
            "with Ctrl+C and continue it later, from each trial's last checkpoint, with: "
            "rllib train file x.yaml --resume"
        ]
        stranded.status = "RUNNING"
        now[0] = 210.0
        watch.on_step_end(0, trials)
        stranded.status = "PENDING"  # retried after a failure: its wait starts again
        for now[0] in (220.0, 275.0):
            watch.on_step_end(0, trials)
        assert len(warnings()) == 1
        now[0] = 286.0  # the cluster is read at most every 10 s (last at 275)
        watch.on_step_end(0, trials)
        assert len(warnings()) == 2 and warnings()[1].startswith("on-gpu has waited 66 s for 1 GPU;")


def test_shortfall_names_what_no_node_or_no_cluster_has():
    two_nodes = [{"CPU": 2.0, "doomed": 1.0}, {"CPU": 2.0}]
    assert shortfall([{"CPU": 1, "doomed": 2}], "PACK", two_nodes) == (
        "for 2 doomed; the cluster has 1 doomed"
    )
    assert shortfall([{"CPU": 3}, {"CPU": 2}], "PACK", two_nodes) == "for 5 CPUs; the cluster has 4 CPUs"
    # Enough in all, but no node holds the bundle, or the strictly packed group.
    assert shortfall([{"CPU": 3}], "PACK", two_nodes) == (
        "for 3 CPUs on one node; no node of the cluster has that much"
    )
    assert shortfall([{"CPU": 1}, {"CPU": 2}], "STRICT_PACK", two_nodes) == (
        "for 3 CPUs on one node; no node of the cluster has that much"
    )
    assert shortfall([{"CPU": 1}, {"CPU": 2}], "PACK", two_nodes) is None
    assert shortfall([{"CPU": 2, "doomed": 1}, {"CPU": 2}], "SPREAD", two_nodes) is None


def test_a_lost_actor_is_read_from_either_of_rays_errors():
    def error_file(*exception: str) -> str:  # Tune's error.txt: a header, Ray's traceback, the error
        return "\n".join(
            [
                "Failure # 1 (occurred at 2026-11-29_16-06-37)",
                "Traceback (most recent call last):",
                '  File "ray/tune/execution/tune_controller.py", line 1295, in _on_result',
                "    raise error",
                *exception,
            ]
        )

    unavailable = error_file(
        "ray.exceptions.ActorUnavailableError: The actor 17e06a7660d3e293e730664502000000 "
        "is unavailable: The actor is temporarily unavailable: RpcError: Socket closed."
    )
    died = error_file(
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: GePPO",
        "\tactor_id: c7389fb25d2abf5ea0e4981202000000",
        "\tpid: 26150",
        "The actor is dead because its node has died. Node Id: " + "ab" * 28,
    )
    crashed = error_file("ValueError: observation 7 is NaN")
    assert actor_lost(unavailable) and actor_lost(died)
    assert not actor_lost(crashed)
    # Only the last failure counts: an actor lost before a retry that then crashed is not.
    assert not actor_lost(unavailable + "\n" + crashed)
