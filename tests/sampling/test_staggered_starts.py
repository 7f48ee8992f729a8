"""Staggered episode starts (rllib_geppo/sampling/staggered_starts.py): which first episodes are cut,
where, and that nothing else is."""

import gymnasium as gym
import pytest

from rllib_geppo import GePPOConfig
from rllib_geppo.sampling.env_runner import GePPOEnvRunner
from rllib_geppo.sampling.staggered_starts import FirstEpisodeLimit, first_episode_limit, num_training_envs


def test_first_episode_limits_spread_the_envs_evenly_over_the_time_limit():
    assert [first_episode_limit(1000, g, 8) for g in range(8)] == [1000, 875, 750, 625, 500, 375, 250, 125]
    assert [first_episode_limit(1000, g, 3) for g in range(3)] == [1000, 667, 333]
    assert first_episode_limit(1000, 0, 1) == 1000  # one env keeps the paper's episodes
    with pytest.raises(ValueError, match="outside"):
        first_episode_limit(1000, 8, 8)


def test_a_run_counts_the_envs_of_every_sampler_and_the_driver_as_one_sampler():
    assert num_training_envs(2, 4) == 8
    assert num_training_envs(1, 8) == 8
    assert num_training_envs(0, 8) == 8  # num_env_runners=0: the driver samples


def episode_lengths(env: gym.Env, steps: int) -> list[tuple[int, bool, bool]]:
    """(length, terminated, truncated) of each episode ended within ``steps`` env steps."""
    env.reset(seed=0)
    episodes, length = [], 0
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        length += 1
        if terminated or truncated:
            episodes.append((length, terminated, truncated))
            env.reset()
            length = 0
    return episodes


def test_only_the_first_episode_is_cut_and_as_a_truncation():
    env = FirstEpisodeLimit(gym.make("Pendulum-v1"), 30)  # Pendulum's time limit: 200 steps
    assert episode_lengths(env, 630) == [
        (30, False, True),
        (200, False, True),
        (200, False, True),
        (200, False, True),
    ]


def test_a_termination_before_the_cut_is_left_alone():
    env = FirstEpisodeLimit(gym.make("CartPole-v1"), 10_000)  # ends long before the cut
    lengths = episode_lengths(env, 200)
    assert lengths and all(terminated and not truncated for _, terminated, truncated in lengths)


def runner(*, worker_index: int, evaluation: bool = False, stagger: bool = True) -> GePPOEnvRunner:
    cfg = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
        .training(stagger_starts=stagger)
        .debugging(seed=0)
    )
    if evaluation:
        # Two evaluation envs too (GePPO evaluates on one by default), neither of them cut.
        cfg = cfg.evaluation(evaluation_config={"num_envs_per_env_runner": 2}).get_evaluation_config_object()
    cfg.validate()
    return GePPOEnvRunner(config=cfg, worker_index=worker_index)


def first_episode_lengths(env_runner: GePPOEnvRunner) -> list[int]:
    episodes = env_runner.sample(num_timesteps=420, random_actions=True)
    return [len(e) for e in episodes if e.t_started == 0 and e.is_done]


@pytest.mark.parametrize("worker_index, expected", [(1, [150, 200]), (2, [50, 100])])
def test_each_training_env_of_the_run_gets_its_own_phase(worker_index, expected):
    # 2 EnvRunners x 2 envs = 4 training envs over Pendulum's 200 steps: 200, 150, 100, 50.
    assert sorted(first_episode_lengths(runner(worker_index=worker_index))) == expected


def test_evaluation_envs_and_runs_without_the_setting_keep_whole_episodes():
    assert first_episode_lengths(runner(worker_index=2, evaluation=True)) == [200, 200]
    assert first_episode_lengths(runner(worker_index=2, stagger=False)) == [200, 200]


def test_the_setting_must_be_a_bool():
    with pytest.raises(ValueError, match="stagger_starts"):
        GePPOConfig().environment("Pendulum-v1").training(stagger_starts="yes").validate()
