"""A policy restored from a checkpoint acts as the EnvRunner acted in training: flat Box (GePPO's
own normalisation), Dict (RLlib's flattening connector), image (CNN) observations, RLlib's
MeanStdFilter connector, whose place GePPO's module takes, so that the module restored alone
returns what the trained policy returned, and a user's module whose actions RLlib rescales."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray import tune
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec

from rllib_geppo import GePPOConfig, SavedPolicy
from rllib_geppo.examples.cartpole_dict import CartPoleDict

from envs import ActionReport


@pytest.fixture(scope="module", autouse=True)
def recorded_env(local_ray):
    tune.register_env(
        "recorded",
        lambda config: Recorded(CartPoleDict() if config["id"] == "CartPoleDict" else gym.make(config["id"])),
    )


RAW_OBSERVATIONS: list = []  # what the envs returned, before any connector (EnvRunner in the driver)
START_STATES: list = []  # Pendulum's state at each reset


class Recorded(gym.Wrapper):
    """Records every observation the env returns, as the EnvRunner's connectors then get it."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        RAW_OBSERVATIONS.append(obs)
        START_STATES.append(np.copy(getattr(self.env.unwrapped, "state", None)))
        return obs, info

    def step(self, action):
        obs, *rest = self.env.step(action)
        RAW_OBSERVATIONS.append(obs)
        return obs, *rest


def recorded(env_id: str) -> GePPOConfig:
    return GePPOConfig().environment("recorded", env_config={"id": env_id})


def pendulum_with_filter() -> GePPOConfig:
    """Pendulum behind RLlib's filter, as RLlib's MeanStdFilter example trains PPO."""
    return recorded("Pendulum-v1").env_runners(
        env_to_module_connector=lambda env, spaces, device: MeanStdFilter()
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
    (the module alone would not: Dict observations reach it flattened, actions are clipped to
    the bounds)."""
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
    np.testing.assert_allclose(acted, expected, rtol=1e-5, atol=1e-6)
    if case != "image":  # Breakout's greedy paddle may stand still
        assert len(set(map(str, acted))) > 1


def test_a_module_trained_behind_mean_std_filter_returns_as_trained_when_restored_alone(tmp_path):
    """RLlib's MeanStdFilter example, deployed as docs/python.md shows: the RLModule restored
    alone, on raw observations, greedy, from the start state of an episode the trained
    EnvRunner ran greedily, gets that episode's return (a module that left the filter's
    statistics behind would not: -1,319 against -166 on a trained Pendulum)."""
    config = (
        pendulum_with_filter()
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=256, num_epochs=1, num_minibatches=2)
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            algo.train()
        checkpoint = algo.save_to_path(str(tmp_path))
        START_STATES.clear()
        [episode] = algo.env_runner.sample(num_episodes=1, explore=False)
    finally:
        algo.stop()
    module = RLModule.from_checkpoint(f"{checkpoint}/learner_group/learner/rl_module/default_policy")
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    env.unwrapped.state = START_STATES[0]
    obs = env.unwrapped._get_obs()
    deployed_return = 0.0
    for _ in range(len(episode)):
        with torch.no_grad():
            inputs = module.forward_inference({Columns.OBS: torch.as_tensor(obs[None])})[
                Columns.ACTION_DIST_INPUTS
            ]
        action = module.get_inference_action_dist_cls().from_logits(inputs).to_deterministic().sample()
        obs, reward, *_ = env.step(np.clip(action[0].numpy(), -2.0, 2.0))
        deployed_return += reward
    assert len(episode) == 200 and deployed_return == pytest.approx(episode.get_return(), rel=1e-5)


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


def test_a_users_module_deployed_acts_with_rllibs_action_rescaling(tmp_path):
    """RLlib's PPO module, normalize_actions left unset (on for a user's module, as in PPO): on
    the observations of a greedy episode, the restored policy sends the env what the EnvRunner
    sent, each greedy action mapped from [-1, 1] to the bounds [0, 10] x [-3, -1]."""
    algo = (
        GePPOConfig()
        .environment(ActionReport)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=DefaultPPOTorchRLModule, catalog_class=PPOCatalog)
        )
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        checkpoint = algo.save_to_path(str(tmp_path))
        [episode] = algo.env_runner.sample(num_episodes=1, explore=False)
    finally:
        algo.stop()
    policy = SavedPolicy.from_checkpoint(checkpoint)
    acted = np.array([policy.act(obs) for obs in episode.get_observations()[:-1]])
    sent = np.array([info["action"] for info in episode.get_infos()[1:]])
    low, high = ActionReport.action_space.low, ActionReport.action_space.high
    mapped = np.clip(low + (episode.get_actions() + 1.0) * (high - low) / 2.0, low, high)
    np.testing.assert_allclose(sent, mapped, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(acted, sent, rtol=1e-5, atol=1e-6)
    assert ((mapped > low) & (mapped < high)).all(axis=1).any()  # not all at a bound, as clipped alone
