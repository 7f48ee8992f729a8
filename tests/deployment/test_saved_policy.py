"""A policy restored from a checkpoint acts as the EnvRunner acted in training: flat Box (GePPO's
own normalisation), Dict (RLlib's flattening connector), image (CNN) observations, and a user's
module with RLlib's MeanStdFilter connector."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray import tune
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rllib_geppo import GePPOConfig, SavedPolicy
from rllib_geppo.examples.cartpole_dict import CartPoleDict


@pytest.fixture(scope="module", autouse=True)
def recorded_env(local_ray):
    tune.register_env(
        "recorded",
        lambda config: Recorded(CartPoleDict() if config["id"] == "CartPoleDict" else gym.make(config["id"])),
    )


RAW_OBSERVATIONS: list = []  # what the envs returned, before any connector (EnvRunner in the driver)


class Recorded(gym.Wrapper):
    """Records every observation the env returns, as the EnvRunner's connectors then get it."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        RAW_OBSERVATIONS.append(obs)
        return obs, info

    def step(self, action):
        obs, *rest = self.env.step(action)
        RAW_OBSERVATIONS.append(obs)
        return obs, *rest


def recorded(env_id: str) -> GePPOConfig:
    return GePPOConfig().environment("recorded", env_config={"id": env_id})


def pendulum_with_filter() -> GePPOConfig:
    """A user's module (RLlib's PPO module, which does not normalise) behind RLlib's filter."""
    return (
        recorded("Pendulum-v1")
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=DefaultPPOTorchRLModule, catalog_class=PPOCatalog)
        )
        .env_runners(env_to_module_connector=lambda env, spaces, device: MeanStdFilter())
    )


CASES = {
    "box": lambda: recorded("Pendulum-v1"),
    "dict": lambda: recorded("CartPoleDict"),
    "image": lambda: recorded("MinAtar/Breakout-v1"),
    "filter": pendulum_with_filter,
}


@pytest.mark.parametrize("case", CASES)
def test_a_saved_policy_acts_as_the_env_runner_did(case, tmp_path):
    """On the raw observations the EnvRunner got, the restored policy picks its greedy actions
    (the module alone would not: Dict observations reach it flattened, a filter's statistics
    live in the EnvRunner's connector, actions are clipped to the bounds)."""
    if case == "image":
        pytest.importorskip("minatar")
    config = (
        CASES[case]()
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=256, num_epochs=1, num_minibatches=2)
    )
    algo = config.build_algo()
    try:
        for _ in range(2):  # the observation statistics and weights move from their start
            algo.train()
        checkpoint = algo.save_to_path(str(tmp_path))
        RAW_OBSERVATIONS.clear()
        [episode] = algo.env_runner.sample(num_episodes=1, explore=False)  # a new episode, greedy
        space = algo.env_runner.env.unwrapped.single_action_space
    finally:
        algo.stop()
    policy = SavedPolicy.from_checkpoint(checkpoint)
    steps = min(40, len(episode))
    acted = np.array([policy.act(obs) for obs in RAW_OBSERVATIONS[:steps]])
    actions = episode.get_actions()[:steps]
    expected = np.clip(actions, space.low, space.high) if isinstance(space, gym.spaces.Box) else actions
    # The live EnvRunner's filter went on folding this episode's observations into its
    # statistics; the saved policy keeps those it was saved with, so its actions differ by that.
    np.testing.assert_allclose(acted, expected, rtol=1e-5, atol=1e-2 if case == "filter" else 1e-6)
    if case != "image":  # Breakout's greedy paddle may stand still
        assert len(set(map(str, acted))) > 1


def test_a_missing_or_multi_agent_checkpoint_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a checkpoint of an Algorithm on RLlib's new API stack"):
        SavedPolicy.from_checkpoint(tmp_path)
    (tmp_path / "env_runner").mkdir()
    for module_id in ("p0", "p1"):
        (tmp_path / "learner_group" / "learner" / "rl_module" / module_id).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"holds the modules \['p0', 'p1'\], not 'default_policy'"):
        SavedPolicy.from_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="is a multi-agent checkpoint"):
        SavedPolicy.from_checkpoint(tmp_path, module_id="p0")


def test_a_policy_trained_without_clipping_acts_unclipped_when_deployed(tmp_path):
    """``clip_actions=False``: the deployed pipeline is rebuilt with the training pipeline's
    settings, so a mean of 10 on Pendulum (bounds +-2) reaches the env as 10, as in training."""
    algo = (
        GePPOConfig()
        .environment("Pendulum-v1", clip_actions=False)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .training(train_batch_size_per_learner=256, num_epochs=1, num_minibatches=2)
        .build_algo()
    )
    try:
        module = algo.learner_group._learner.module["default_policy"]
        last = module.pi[-1]
        with torch.no_grad():  # the mean in normalised units 5: 10 in the env's (centre 0, half range 2)
            last.weight.zero_()
            last.bias.fill_(5.0)
        checkpoint = algo.save_to_path(str(tmp_path))
    finally:
        algo.stop()
    policy = SavedPolicy.from_checkpoint(checkpoint)
    assert policy.act(np.zeros(3, np.float32)) == pytest.approx([10.0])
    assert policy.module_to_env.clip_actions is False
