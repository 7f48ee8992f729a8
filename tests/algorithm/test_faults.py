"""Fault injection: a crashing environment, NaN rewards and observations, a non-finite update,
bad settings and bad files. Nothing non-finite may reach the store, the statistics, the weights
or a checkpoint; every bad input gets a message that names it and the fix."""

import logging
import math
import re
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
import ray
import ray.cloudpickle
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.tune.registry import register_env

from rllib_geppo import GePPO, GePPOConfig
from rllib_geppo.algorithm.env_runners import EnvRunnerFailedError, EnvRunnerTimeoutError
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.module_stores import NonFiniteDataError
from rllib_geppo.core.segments import Segment, from_layout, lay_out
from rllib_geppo.sampling.env_runner import GePPOEnvRunner

from envs import Fault
from helpers import update_inputs

# The environments below are defined here: ship them to Ray's workers by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def fault_env(local_ray):
    register_env("fault-pendulum", Fault)


def config(kind: str, at: int, **training) -> GePPOConfig:
    """One env, so the bad step happens once."""
    return (
        GePPOConfig()
        .environment("fault-pendulum", env_config={"kind": kind, "at": at})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=256, num_epochs=2, num_minibatches=4, **training)
    )


def finite_everywhere(algo: GePPO) -> None:
    """No NaN or inf in the store, the statistics, the module (weights and buffers) or Adam."""
    for batch in algo.module_state().store.batches:
        for name, column in batch.layout.items():
            assert np.isfinite(column).all() if column.dtype.kind == "f" else True, name
    assert (
        np.isfinite(algo.module_state().obs_stats.mean).all()
        and np.isfinite(algo.module_state().obs_stats.var).all()
    )
    assert np.isfinite(algo.module_state().return_stats.var) and np.isfinite(algo.module_state().policy_lr)
    learner = algo.learner_group._learner
    for name, tensor in learner.module[DEFAULT_MODULE_ID].state_dict().items():
        assert torch.isfinite(tensor).all(), name
    for state in learner.get_optimizer(DEFAULT_MODULE_ID, "geppo_adam").state.values():
        assert all(torch.isfinite(v).all() for v in state.values())


def test_nan_reward_stops_training_and_names_env_column_step_and_episode():
    algo = config("nan_reward", at=700).build_algo()  # step 700: Pendulum episode 4, step 100
    try:
        algo.train()
        algo.train()
        stored, stats = len(algo.module_state().store.batches), algo.module_state().return_stats.get_state()
        with pytest.raises(
            NonFiniteDataError,
            match=r"Environment 'fault-pendulum' returned a "
            r"non-finite reward = nan at env step 100 in episode \w+\..*"
            r"nonfinite_data='drop'",
        ):
            algo.train()
        assert len(algo.module_state().store.batches) == stored  # nothing of the bad batch was kept
        assert algo.module_state().return_stats.get_state()["count"] == stats["count"]
        finite_everywhere(algo)
    finally:
        algo.stop()


def test_nan_observation_stops_training_and_names_the_index():
    algo = config("nan_obs", at=300).build_algo()
    try:
        algo.train()
        with pytest.raises(NonFiniteDataError, match="observation index 1 = nan at env step 100"):
            algo.train()
    finally:
        algo.stop()


@pytest.mark.parametrize("kind", ["nan_reward", "nan_obs"])
def test_drop_mode_drops_the_chunk_and_trains_on(kind, tmp_path):
    algo = config(kind, at=300, nonfinite_data="drop").build_algo()
    try:
        results = [algo.train() for _ in range(4)]
        dropped = [r["learners"][DEFAULT_MODULE_ID]["num_dropped_segments"] for r in results]
        assert dropped[1] == 1 and sum(dropped) >= 1  # the chunk holding step 300
        assert all(math.isfinite(r["learners"][DEFAULT_MODULE_ID]["tv"]) for r in results)
        finite_everywhere(algo)
        algo.save_to_path(str(tmp_path))
        restored = GePPO.from_checkpoint(str(tmp_path))
        try:
            finite_everywhere(restored)
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_a_non_finite_step_is_skipped_and_leaves_weights_and_adam_unchanged():
    env = gym.make("Pendulum-v1")
    learner = GePPOConfig().environment("Pendulum-v1").build_learner(env=env)
    rng = np.random.default_rng(0)
    layout = lay_out(
        [
            Segment(
                obs=rng.normal(size=(33, 3)),
                actions=rng.normal(size=(32, 1)),
                rewards=rng.normal(size=32),
                behaviour_logp=rng.normal(size=32) - 1,
                versions=np.zeros(32, int),
                terminated=False,
            )
        ]
    )

    inputs = update_inputs(3)
    data = learner.prepare_update(DEFAULT_MODULE_ID, layout, inputs)
    _, finite = learner.minibatch_step(DEFAULT_MODULE_ID, data, 0.1)  # one good step: Adam has state
    assert finite
    module = learner.module[DEFAULT_MODULE_ID]
    optimizer = learner.get_optimizer(DEFAULT_MODULE_ID, "geppo_adam")
    weights = {k: v.clone() for k, v in module.state_dict().items()}
    adam = {id(p): {k: v.clone() for k, v in s.items()} for p, s in optimizer.state.items()}
    data[C.ADVANTAGES][3] = float("nan")
    _, finite = learner.minibatch_step(DEFAULT_MODULE_ID, data, 0.1)
    assert not finite
    for name, tensor in module.state_dict().items():
        torch.testing.assert_close(tensor, weights[name], msg=name)
    for param, state in optimizer.state.items():
        for key, value in state.items():
            torch.testing.assert_close(value, adam[id(param)][key], msg=key)


def test_a_minibatch_whose_samples_all_weigh_zero_takes_no_step_and_is_no_skipped_step():
    """Versions older than nu reaches weigh 0: a minibatch of only those (small multi-agent
    stores) once gave 0/0 in the advantages' standardisation, a NaN loss and a skipped step."""
    learner = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .training(num_epochs=1, shuffle_batch_per_epoch=False)
        .build_learner(env=gym.make("Pendulum-v1"))
    )
    rng = np.random.default_rng(0)

    def version(v: int) -> Segment:
        return Segment(
            obs=rng.normal(size=(33, 3)),
            actions=rng.normal(size=(32, 1)),
            rewards=rng.normal(size=32),
            behaviour_logp=rng.normal(size=32) - 1,
            versions=np.full(32, v),
            terminated=False,
        )

    layout = lay_out([version(0), version(1)])  # unshuffled: minibatch 1 is version 0's rows
    inputs = update_inputs(3, weights_by_version={1: 2.0}, minibatches_per_epoch=2)
    stats, _ = learner.update_module(DEFAULT_MODULE_ID, layout, inputs)
    assert stats["num_skipped_steps"] == 0 and stats["num_gradient_steps"] == 2
    assert math.isfinite(stats["policy_loss"]) and math.isfinite(stats["vf_loss"])
    optimizer = learner.get_optimizer(DEFAULT_MODULE_ID, "geppo_adam")
    assert {int(state["step"]) for state in optimizer.state.values()} == {1}  # version 1's step only


def test_a_wholly_non_finite_update_leaves_the_lr_and_weights_and_is_reported():
    algo = config("nan_reward", at=10**9).build_algo()
    try:
        algo.train()
        lr = algo.module_state().policy_lr
        weights = {
            k: v.clone()
            for k, v in algo.learner_group._learner.module[DEFAULT_MODULE_ID].state_dict().items()
        }
        # Bypass the data check, as a bug upstream of the learner would: every target is NaN.
        bad = dict(algo.module_state().store.batches[-1].layout)
        bad[C.REWARDS] = np.full_like(bad[C.REWARDS], np.nan)
        bad[C.VERSION] = np.full_like(bad[C.VERSION], algo.policy_version)
        algo.module_state().store.add(from_layout(bad))
        algo._update_learners()
        learner = algo.metrics.peek(("learners", DEFAULT_MODULE_ID))
        assert learner["num_skipped_steps"] == learner["num_gradient_steps"] == 8
        assert algo.module_state().policy_lr == lr
        for name, tensor in algo.learner_group._learner.module[DEFAULT_MODULE_ID].state_dict().items():
            if not name.startswith("obs_"):  # the statistics are installed after every update
                torch.testing.assert_close(tensor, weights[name], msg=name)
    finally:
        algo.stop()


def test_a_crashing_env_runner_is_replaced_and_the_store_is_kept(tmp_path):
    algo = (
        config("crash", at=600)
        .environment(env_config={"kind": "crash", "at": 600, "marker": str(tmp_path / "crashed")})
        .env_runners(num_env_runners=1)
        .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=0)
    ).build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        assert (tmp_path / "crashed").exists()  # the fault happened in iteration 3
        assert len(algo.module_state().store.batches) == 2
        # RLlib replaces the EnvRunner (iterations without samples meanwhile); training goes
        # on with the store it had, and the store fills.
        deadline = time.monotonic() + 240  # a bound on the test; a new EnvRunner takes seconds to start
        while len(algo.module_state().store.batches) < 4 and time.monotonic() < deadline:
            results.append(algo.train())
        assert len(algo.module_state().store.batches) == 4
        # Ages stay true: the learners kept updating on the old batches while no new ones came.
        ages = algo.module_state().store.ages(algo.policy_version - 1)
        assert ages[:2] == [0, 1] and ages[2] > 2 and ages[3] == ages[2] + 1
        steps = [r["num_env_steps_sampled_lifetime"] for r in results]
        assert steps == sorted(steps) and steps[-1] >= 4 * 256
        # An iteration without a new batch to update at lag <= 1 runs no update (NaN metrics).
        learners = [r["learners"][DEFAULT_MODULE_ID] for r in results]
        updates = [x for x in learners if not math.isnan(x["sample_lag"])]
        assert len(updates) >= 4 and all(x["sample_lag"] <= 1 and math.isfinite(x["tv"]) for x in updates)
    finally:
        algo.stop()


def test_a_failed_env_step_recreates_the_env_or_names_the_fix(tmp_path):
    """GePPO's EnvRunner handles a failing env.step() as RLlib's does: with
    restart_failed_sub_environments it recreates the env, counts the failure and samples the
    full count afresh; without, the error names the setting."""

    def runner(marker: str, restart: bool) -> GePPOEnvRunner:
        crash = config("crash", at=30).environment(
            env_config={"kind": "crash", "at": 30, "marker": str(tmp_path / marker)}
        )
        return GePPOEnvRunner(config=crash.fault_tolerance(restart_failed_sub_environments=restart))

    restarting = runner("a", restart=True)
    episodes = restarting.sample(num_timesteps=100)
    assert (tmp_path / "a").exists() and sum(map(len, episodes)) == 100
    assert restarting.get_metrics()["num_env_step_failures"] == 1
    with pytest.raises(RuntimeError, match=r"restart_failed_sub_environments=True") as error:
        runner("b", restart=False).sample(num_timesteps=100)
    assert "the simulator crashed" in str(error.value)


def test_env_step_metrics_are_tallied_once_per_sample_call():
    """The EnvRunner counts every env.step() call (autoreset steps included) into RLlib's
    Prometheus counter and its step timer, in one tally per sample() call."""
    runner = GePPOEnvRunner(config=config("none", at=0))
    tallies, calls = [], []

    class Counter:
        info = {"name": "num_try_env_step"}

        def inc(self, value):
            tallies.append(value)

    runner._metrics_num_try_env_step = Counter()
    vector_env = runner.env.env  # what the EnvRunner steps, beneath RLlib's DictInfoToList
    step = vector_env.step
    vector_env.step = lambda actions: (calls.append(1), step(actions))[1]
    for n in (150, 100):  # Pendulum truncates after 200 steps: the second call autoresets once
        runner.sample(num_timesteps=n)
    assert tallies == [150, 101] and len(calls) == 251
    seconds = runner.get_metrics()["env_step_timer"]
    assert 0 < seconds < 1


class RewardAt(gym.Wrapper):
    """Pendulum whose reward at one step (counted over the env's life) is ``value``."""

    def __init__(self, config: dict):
        super().__init__(gym.make("Pendulum-v1"))
        self.at, self.value, self.steps = config["at"], config["value"], 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, self.value if self.steps == self.at else reward, terminated, truncated, info


def reward_config(value: float, at: int, **training) -> GePPOConfig:
    register_env("reward-pendulum", RewardAt)
    return config("nan_reward", at=10**9, **training).environment(
        "reward-pendulum", env_config={"at": at, "value": value}
    )


def test_restore_in_place_acts_with_the_restored_policy(tmp_path):
    # PBT's exploit step: restore an older state into the live algorithm, then train; from a
    # checkpoint (restore_from_path) and in memory (set_state), evaluation EnvRunners included.
    algo = (
        config("nan_reward", at=10**9)
        .env_runners(num_env_runners=1)
        .evaluation(
            evaluation_interval=1,
            evaluation_num_env_runners=1,
            evaluation_duration=1,
            evaluation_duration_unit="episodes",
        )
        .training(train_batch_size_per_learner=128, num_epochs=1)
    ).build_algo()
    module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]

    def weights_everywhere() -> list[dict]:
        def runner_weights(group) -> list[dict]:
            return group.foreach_env_runner(lambda runner: runner.module.get_state(), local_env_runner=False)

        return [
            module.get_state(inference_only=True),
            *runner_weights(algo.env_runner_group),
            *runner_weights(algo.eval_env_runner_group),
        ]

    try:
        for _ in range(3):
            algo.train()
        algo.save_to_path(str(tmp_path))
        state, version = algo.get_state(), algo.policy_version
        saved = module.get_state(inference_only=True)
        for _ in range(3):
            algo.train()
        assert not np.array_equal(module.get_state()["pi.0.weight"], saved["pi.0.weight"])
        algo.set_state(state)
        assert algo.policy_version == version
        assert len(weights_everywhere()) == 3
        for weights in weights_everywhere():
            for name, value in saved.items():
                np.testing.assert_array_equal(weights[name], value, err_msg=name)

        algo.train()
        algo.restore_from_path(str(tmp_path))
        version = algo.policy_version
        restored = {k: v.clone() for k, v in module.state_dict().items()}
        for weights in weights_everywhere():
            for name, value in saved.items():
                np.testing.assert_array_equal(weights[name], value, err_msg=name)
        algo.train()
        newest = algo.module_state().store.batches[-1].layout
        real = newest[C.LOSS_MASK]
        assert set(newest[C.VERSION][real]) == {version}  # collected by the restored policy...
        module.load_state_dict(restored)
        with torch.no_grad():
            inputs = module.forward_inference({"obs": torch.as_tensor(newest[C.OBS][real])})
            dist = module.get_inference_action_dist_cls().from_logits(inputs["action_dist_inputs"])
            logp = dist.logp(torch.as_tensor(newest[C.ACTIONS][real])).numpy()
        np.testing.assert_allclose(newest[C.BEHAVIOUR_LOGP][real], logp, atol=1e-5)  # ...truly
    finally:
        algo.stop()


def test_a_reward_beyond_float32_is_non_finite():
    algo = reward_config(1e39, at=300).build_algo()  # finite in float64, inf in the float32 store
    try:
        algo.train()
        with pytest.raises(NonFiniteDataError, match=r"reward = 1e\+39 \(beyond float32\) at env step 100"):
            algo.train()
        finite_everywhere(algo)
    finally:
        algo.stop()


def test_a_huge_finite_reward_gets_one_warning_naming_step_and_episode(caplog):
    algo = reward_config(1e30, at=600).build_algo()
    try:
        with caplog.at_level(logging.WARNING, logger="rllib_geppo.algorithm.geppo"):
            results = [algo.train() for _ in range(4)]
        warnings = [r.message for r in caplog.records if "reward scale" in r.message]
        assert len(warnings) == 1, warnings
        assert re.search(
            r"iteration 3: .* returned a reward = 1e\+30 at env step 200 in episode \w+, "
            r"which changes the reward scale .* times",
            warnings[0],
        ), warnings[0]
        scales = [r["learners"][DEFAULT_MODULE_ID]["reward_scale"] for r in results]
        assert scales[1] < 1e3 < 1e25 < scales[3]  # the scale stays huge: documented in bad_input.md
        finite_everywhere(algo)
    finally:
        algo.stop()


def test_a_lost_batch_is_resampled_before_the_update(caplog):
    # Overlapped sampling; iteration 3's only chunk holds a NaN and is dropped: the next update
    # waits for a new batch instead of running at lag 2.
    algo = (
        config("nan_reward", at=300, nonfinite_data="drop")
        .env_runners(num_env_runners=1)
        .training(train_batch_size_per_learner=128, num_epochs=1)
    ).build_algo()
    try:
        results = [algo.train() for _ in range(6)]
        learners = [r["learners"][DEFAULT_MODULE_ID] for r in results]
        assert [x["num_dropped_segments"] for x in learners] == [0, 0, 1, 0, 0, 0]
        assert [x["sample_lag"] for x in learners] == [0, 1, 1, 0, 1, 1]
        assert algo.module_state().store.ages(algo.policy_version) == [1, 2, 3, 5]
    finally:
        algo.stop()


def test_env_runners_that_never_come_back_stop_the_run_after_the_restore_timeout(tmp_path):
    """The restarted EnvRunner's constructor fails: RLlib's health checks then fail without a
    log line, so no sample reports an error; the restore timeout stops the run."""
    algo = (
        config("gone", at=300)
        .environment(env_config={"kind": "gone", "at": 300, "marker": str(tmp_path / "gone")})
        .env_runners(num_env_runners=1)
        .training(overlap_sampling=False)
        .fault_tolerance(delay_between_env_runner_restarts_s=0, env_runner_restore_timeout_s=3)
    ).build_algo()
    try:
        deadline = time.monotonic() + 120  # a bound on the test, not the behaviour under test
        with pytest.raises(
            EnvRunnerFailedError,
            match=r"no env step for \d+ s, and no EnvRunner "
            r"reported an error.*env_runner_restore_timeout_s",
        ):
            while time.monotonic() < deadline:
                algo.train()
        assert (tmp_path / "gone").exists()
    finally:
        algo.stop()


def test_an_env_that_blocks_fails_the_run_instead_of_hanging():
    algo = (
        config("block", at=100)
        .env_runners(num_env_runners=1, sample_timeout_s=3)
        .training(overlap_sampling=False)
    ).build_algo()
    try:
        with pytest.raises(
            EnvRunnerTimeoutError,
            match=r"1 of 2 EnvRunners did not take the new "
            r"weights within 3 s \(sample_timeout_s\).*'fault-pendulum' may block",
        ):
            algo.train()
    finally:
        algo.stop()  # returns: the blocked EnvRunner was killed


def test_a_failed_env_runner_reports_its_error_at_once_not_a_timeout():
    """RLlib's EnvRunner sleeps delay_between_env_runner_restarts_s after an error before it
    exits, so a shorter sample_timeout_s timed out on it as on an env that blocks; GePPO's
    returns its error at once, and exits at its next call (stop, here, without the delay)."""
    algo = (
        config("broken", at=1)
        .env_runners(num_env_runners=1, sample_timeout_s=10)
        .fault_tolerance(delay_between_env_runner_restarts_s=60)
        .training(overlap_sampling=False, max_failed_samples_in_a_row=1)
    ).build_algo()
    try:
        with pytest.raises(
            EnvRunnerFailedError,
            match=r"^iteration 1: .* The last EnvRunner error: "
            r"RuntimeError: GePPO's EnvRunner: env\.step\(\) failed with RuntimeError: "
            r"the simulator is broken\. .*shows the problem: step\(\) raised",
        ):
            algo.train()
    finally:
        algo.stop()


def test_the_summary_shows_the_first_line_of_the_last_failures_error(tmp_path):
    from rllib_geppo.cli.outcomes import error_text, exception_line

    def error_message(path):
        return exception_line(error_text(path))

    frames = '  File "geppo.py", line 9, in train\n    raise Error(\n    ^^^^^\n'
    (tmp_path / "error.txt").write_text(
        "Failure # 1 (occurred at 2026-01-01_00-00-00)\nray::GePPO.train() (pid=1)\n"
        + frames
        + "ValueError: the first failure\nFailure # 2 (occurred at 2026-01-01_00-01-00)\n"
        "ray::GePPO.train() (pid=2)\n"
        + frames
        + "The above exception was the direct cause of:\n\n"
        + frames
        + "KeyError: "
        + "x" * 400
        + "\nits second line\n"
    )
    assert error_text(tmp_path / "missing.txt") == "" and error_message(tmp_path / "missing.txt") is None
    assert error_message(tmp_path / "error.txt") == "KeyError: " + "x" * 400
    (tmp_path / "died.txt").write_text(
        "Failure # 1 (occurred at 2026)\nThe actor died unexpectedly.\n\tpid: 3\n"
    )
    assert error_message(tmp_path / "died.txt") == "The actor died unexpectedly."


def test_an_env_that_fails_at_every_step_stops_the_run_with_its_error():
    algo = (
        config("broken", at=1)
        .env_runners(num_env_runners=1)
        .fault_tolerance(delay_between_env_runner_restarts_s=0)
        .training(max_failed_samples_in_a_row=2)
    ).build_algo()
    try:
        with pytest.raises(
            EnvRunnerFailedError,
            match="2 samples in a row failed with no env step.*"
            "shows the problem: step\\(\\) raised RuntimeError: the simulator is "
            "broken \\(at step 1\\)",
        ):
            deadline = time.monotonic() + 300  # a bound on the test (restarts take seconds each)
            while time.monotonic() < deadline:
                algo.train()
    finally:
        algo.stop()


def test_a_restarted_env_runner_and_recreated_envs_get_new_seeds():
    from rllib_geppo.sampling.env_runner import sampler_seeds

    first, restarted, recreated = (sampler_seeds(7, 0, 2, generation=g) for g in ((0, 0), (1, 0), (0, 1)))
    assert first == sampler_seeds(7, 0, 2)  # the seeds of runs without restarts stay
    assert len({tuple(first[0]), tuple(restarted[0]), tuple(recreated[0])}) == 3
    assert len({first[1], restarted[1], recreated[1]}) == 3
    assert restarted == sampler_seeds(7, 0, 2, generation=(1, 0))  # reproducible


class ArrayReward(gym.Wrapper):
    """Pendulum whose reward is a one-element array: RLlib's episodes cannot take it."""

    def __init__(self, config=None):
        super().__init__(gym.make("Pendulum-v1"))

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, np.array([reward]), terminated, truncated, info


def test_the_driver_diagnosis_names_a_reward_rllib_cannot_take():
    from rllib_geppo.sampling.env_checks import diagnose_env

    problem = diagnose_env(ArrayReward, {})
    assert problem.startswith("step(): The reward returned by `step()` must be a float"), problem
    assert problem.endswith("(at step 1)")
    assert diagnose_env(lambda config: gym.make("Pendulum-v1"), {}) is None
