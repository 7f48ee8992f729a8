"""The spaces and models RLlib's PPO takes: images through a CNN, Dict observations through
RLlib's flattening connector, MultiDiscrete and MultiBinary actions, RLlib's initializers, a
user's own RLModule with RLlib's action rescaling; and the ones GePPO refuses (recurrent models,
modules without values), before any worker starts."""

import math
import sys

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.models.torch.encoder import TorchCNNEncoder
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rllib_geppo import GePPO, GePPOConfig, StackFrames
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.examples.cartpole_dict import MAX_EPISODE_STEPS, CartPoleDict
from rllib_geppo.learner.learner import OPTIMIZER
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule

from envs import ActionReport
from helpers import METRICS

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # EnvRunners make this module's envs


pytestmark = pytest.mark.usefixtures("local_ray")


def small(env, **env_config) -> GePPOConfig:
    """The driver samples: a space takes the same connectors and module there as on an EnvRunner
    (remote sampling is tests/sampling's), without an actor to start."""
    return (
        GePPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=256, num_epochs=2, num_minibatches=4)
    )


def train(config: GePPOConfig, iterations: int = 2) -> tuple[GePPO, dict]:
    algo = config.build_algo()
    for _ in range(iterations):
        result = algo.train()
    learner = result["learners"][DEFAULT_MODULE_ID]
    assert all(math.isfinite(learner[key]) for key in METRICS), learner
    return algo, learner


def module(algo: GePPO):
    return algo.learner_group._learner.module[DEFAULT_MODULE_ID].unwrapped()


class MultiDiscreteCartPole(gym.ActionWrapper):
    """CartPole pushed by the first of two categorical choices (the second does nothing)."""

    def __init__(self, config=None):
        super().__init__(gym.make("CartPole-v1"))
        self.action_space = gym.spaces.MultiDiscrete([2, 3])

    def action(self, action):
        return int(action[0])


class MultiBinaryCartPole(gym.ActionWrapper):
    """CartPole pushed right when the first of three bits is set."""

    def __init__(self, config=None):
        super().__init__(gym.make("CartPole-v1"))
        self.action_space = gym.spaces.MultiBinary(3)

    def action(self, action):
        return int(action[0])


def test_stacked_images_go_through_a_cnn_are_stored_stacked_and_not_normalised():
    """MinAtar's Breakout (10 x 10 x 4 images of 0s and 1s), 2 frames stacked in the env."""
    pytest.importorskip("minatar")
    from ray import tune

    tune.register_env("StackedBreakout", lambda config: StackFrames(gym.make("MinAtar/Breakout-v1"), 2))
    algo, _ = train(small("StackedBreakout"))
    try:
        encoder = module(algo).pi_encoder
        assert isinstance(encoder, TorchCNNEncoder) and isinstance(module(algo).vf_encoder, TorchCNNEncoder)
        assert module(algo).observation_space.shape == (10, 10, 8)  # 2 frames of 4 channels
        state = algo.module_state()
        assert state.obs_stats is None
        stored = state.store.batches[-1].layout[C.OBS]
        assert stored.dtype == np.float32 and stored.shape[1:] == (10, 10, 8)
        assert set(np.unique(stored)) <= {0.0, 1.0}
        # The value network's CNN learns with the value lr, the policy's with the policy lr.
        policy, value = algo.learner_group._learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER).param_groups
        vf_params = {id(p) for p in module(algo).vf_encoder.parameters()}
        assert vf_params <= {id(p) for p in value["params"]}
        assert not vf_params & {id(p) for p in policy["params"]}
    finally:
        algo.stop()


def test_cartpole_dict_truncates_episodes_at_cartpole_v1s_limit():
    env = CartPoleDict()
    env.reset(seed=0)
    for step in range(1, MAX_EPISODE_STEPS + 1):
        env.state = np.zeros(4)  # the pole held upright: only the limit ends the episode
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated and truncated == (step == MAX_EPISODE_STEPS)
    env.reset(seed=1)
    assert not env.step(0)[3]  # reset starts the count again


def test_dict_observations_are_flattened_stored_flat_and_normalised():
    # By class path, which RLlib's new-stack EnvRunners do not make themselves.
    algo, _ = train(small("rllib_geppo.examples.cartpole_dict.CartPoleDict"))
    try:
        assert isinstance(CartPoleDict().observation_space, gym.spaces.Dict)
        assert module(algo).observation_space.shape == (7,)
        state = algo.module_state()
        assert state.store.batches[-1].layout[C.OBS].shape[1:] == (7,)
        assert state.obs_stats.count == state.store.num_steps
    finally:
        algo.stop()


@pytest.mark.parametrize("env", [MultiDiscreteCartPole, MultiBinaryCartPole])
def test_multi_discrete_and_multi_binary_actions_train(env):
    algo, _ = train(small(env))
    try:
        actions = algo.module_state().store.batches[-1].layout[C.ACTIONS]
        assert actions.shape[1:] == env().action_space.shape
        assert set(np.unique(actions[:, 0])) == {0, 1}
    finally:
        algo.stop()


def test_a_users_own_rl_module_trains():
    """RLlib's PPO module, built by its catalog: values from compute_values, the critic's
    parameters (its non-inference attributes) with the value lr."""
    config = small("CartPole-v1").rl_module(
        rl_module_spec=RLModuleSpec(module_class=DefaultPPOTorchRLModule, catalog_class=PPOCatalog)
    )
    algo, _ = train(config)
    try:
        assert isinstance(module(algo), DefaultPPOTorchRLModule)
        _, value = algo.learner_group._learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER).param_groups
        assert {id(p) for p in module(algo).vf.parameters()} <= {id(p) for p in value["params"]}
    finally:
        algo.stop()


class NoValuesModule(TorchRLModule):
    def setup(self):
        self.net = GePPOTorchRLModule(
            observation_space=self.observation_space, action_space=self.action_space, model_config={}
        )

    def _forward(self, batch, **kwargs):
        return self.net._forward(batch)


class RecurrentModule(GePPOTorchRLModule):
    def is_stateful(self) -> bool:
        return True


class GrayImages(gym.Env):
    """Random 10 x 10 single-channel images, the kind RLlib's frame-stacking connector takes."""

    observation_space = gym.spaces.Box(0.0, 1.0, (10, 10, 1), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        pass

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


class UnnamedValueModule(GePPOTorchRLModule):
    """Its value network is not named as such: it would train with the policy's lr and clip."""

    def get_non_inference_attributes(self) -> list[str]:
        return []


@pytest.mark.parametrize(
    "config,message",
    [
        (small("CartPole-v1").rl_module(model_config={"use_lstm": True}), "feed-forward models only"),
        (
            small("CartPole-v1").rl_module(rl_module_spec=RLModuleSpec(module_class=RecurrentModule)),
            "is recurrent",
        ),
        (
            small("CartPole-v1").rl_module(rl_module_spec=RLModuleSpec(module_class=NoValuesModule)),
            "does not implement RLlib's ValueFunctionAPI",
        ),
        (
            small("CartPole-v1").rl_module(rl_module_spec=RLModuleSpec(module_class=UnnamedValueModule)),
            "does not name its value function's parts",
        ),
        (
            small(GrayImages).env_runners(
                env_to_module_connector=lambda env, spaces, device: FrameStackingEnvToModule(num_frames=4)
            ),
            "Fix: stack them in the environment, with rllib_geppo.StackFrames",
        ),
        (
            small("Pendulum-v1")
            .rl_module(
                rl_module_spec=RLModuleSpec(module_class=DefaultPPOTorchRLModule, catalog_class=PPOCatalog)
            )
            .env_runners(env_to_module_connector=lambda env, spaces, device: MeanStdFilter()),
            "RLlib's MeanStdFilter runs here with your own RLModule",
        ),
    ],
)
def test_refused_models_fail_before_any_env_runner_starts(config, message):
    with pytest.raises(ValueError, match=message) as failure:
        config.build_algo()
    assert not [entry for entry in failure.traceback if "env_runner" in str(entry.path)]


def test_stack_frames_concatenates_the_last_observations_on_their_last_axis():
    env = StackFrames(gym.make("CartPole-v1"), 3)
    assert env.observation_space.shape == (12,)
    first, _ = env.reset(seed=0)
    np.testing.assert_array_equal(first, np.tile(first[:4], 3))  # after a reset: the first, 3 times
    second = env.step(0)[0]
    np.testing.assert_array_equal(second[:8], first[:8])  # oldest first: s0, s0, s1
    assert not np.array_equal(second[8:], first[8:])
    with pytest.raises(ValueError, match="flat Box or image"):
        StackFrames(CartPoleDict(), 2)


def test_zero_width_action_dimension_is_refused():
    from rllib_geppo.rl_module.torch_rl_module import check_spaces

    obs_space = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(ValueError, match=r"action dimension 1 of .* has low = 0.5 and high = 0.5"):
        check_spaces(obs_space, gym.spaces.Box(np.float32([-1, 0.5]), np.float32([1, 0.5])))
    check_spaces(obs_space, gym.spaces.Box(np.float32([-1, -np.inf]), np.float32([1, np.inf])))


# -- RLlib's initializers ----------------------------------------------------------------------


def built(model_config, observation_space=None, action_space=None):
    """GePPO's module, for a flat observation of 3 and a Box action of 1 unless given."""
    return RLModuleSpec(
        module_class=GePPOTorchRLModule,
        observation_space=observation_space or gym.spaces.Box(-1.0, 1.0, (3,)),
        action_space=action_space or gym.spaces.Box(-2.0, 2.0, (1,)),
        model_config=model_config,
    ).build()


def assert_orthogonal(linear: nn.Linear, gain: float) -> None:
    """The paper's init: orthogonal rows or columns (whichever are fewer) of norm ``gain``, zero bias."""
    w = linear.weight.detach().double()
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    torch.testing.assert_close(
        gram, gain**2 * torch.eye(len(gram), dtype=torch.double), rtol=0, atol=1e-5 * gain**2
    )
    assert not linear.bias.detach().any()


def test_rllibs_fcnet_initializers_set_the_hidden_layers_and_the_paper_init_stays_the_default():
    """RLlib's MeanStdFilter example's model_config: xavier_uniform_ weights, U(-a, a) with
    a = sqrt(6 / (fan_in + fan_out)), so variance a^2 / 3, and biases of the constant given, in every
    hidden layer of both networks, as RLlib's PPO initialises its encoder; the output layers keep
    the paper's orthogonal init (gain 0.01 policy, 1.0 value), as PPO's heads keep theirs."""
    torch.manual_seed(0)
    xavier = built(
        DefaultModelConfig(
            fcnet_hiddens=[256, 256],
            fcnet_kernel_initializer=torch.nn.init.xavier_uniform_,
            fcnet_bias_initializer="constant_",  # a name, resolved as RLlib resolves it
            fcnet_bias_initializer_kwargs={"val": 0.1},
        )
    )
    default = built({"fcnet_hiddens": [256, 256]})
    for module in (xavier, default):
        assert_orthogonal(module.pi[4], 0.01)
        assert_orthogonal(module.vf[4], 1.0)
    for layer in (xavier.pi[0], xavier.pi[2], xavier.vf[0], xavier.vf[2]):
        fan_out, fan_in = layer.weight.shape
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert layer.weight.abs().max() <= bound
        if fan_in == 256:  # 65,536 weights: their variance within 2% of bound^2 / 3
            assert float(layer.weight.detach().var()) == pytest.approx(bound**2 / 3, rel=0.02)
        assert (layer.bias == 0.1).all()
    for layer in (default.pi[0], default.pi[2], default.vf[0], default.vf[2]):
        assert_orthogonal(layer, math.sqrt(2))
    with pytest.raises(ValueError, match="Not an in-place initializer"):
        built({"fcnet_kernel_initializer": "xavier_uniform"})


def test_rllibs_conv_initializers_set_the_cnn_encoders():
    image = built(
        {"conv_bias_initializer": "constant_", "conv_bias_initializer_kwargs": {"val": 0.5}},
        observation_space=gym.spaces.Box(0.0, 1.0, (10, 10, 4)),
        action_space=gym.spaces.Discrete(3),
    )
    for encoder in (image.pi_encoder, image.vf_encoder):
        biases = [p for name, p in encoder.named_parameters() if name.endswith("bias")]
        assert biases and all((bias == 0.5).all() for bias in biases)


# -- normalize_actions -------------------------------------------------------------------------


def with_ppo_module(config: GePPOConfig) -> GePPOConfig:
    return config.rl_module(
        rl_module_spec=RLModuleSpec(module_class=DefaultPPOTorchRLModule, catalog_class=PPOCatalog)
    )


def test_normalize_actions_left_unset_is_ppos_for_a_users_module_and_off_for_geppos():
    """RLlib's PPO rescales a module's Box actions from [-1, 1] to the bounds by default: so does
    GePPO for a user's module; GePPO's own maps them itself, and refuses a second mapping."""
    geppo, users = (
        GePPOConfig().environment(ActionReport),
        with_ppo_module(GePPOConfig().environment(ActionReport)),
    )
    assert geppo.normalize_actions is None and users.normalize_actions is None
    geppo.validate()
    users.validate()
    assert geppo.normalize_actions is False and users.normalize_actions is True
    with pytest.raises(
        ValueError, match="`normalize_actions=True` would rescale the actions of GePPO's RLModule"
    ):
        GePPOConfig().environment(ActionReport, normalize_actions=True).validate()
    with_ppo_module(GePPOConfig().environment(ActionReport, normalize_actions=False)).validate()


@pytest.mark.parametrize("normalize_actions", [True, False])
def test_a_users_module_gets_rllibs_action_rescaling(normalize_actions):
    """RLlib's EnvRunner sampling RLlib's PPO module: the env gets each sampled action (the
    episode's) mapped from [-1, 1] to the bounds [0, 10] x [-3, -1] and clipped there
    (normalize_actions=True), or clipped only (False)."""
    config = with_ppo_module(
        GePPOConfig()
        .environment(ActionReport, normalize_actions=normalize_actions)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        episodes = algo.env_runner.sample(num_timesteps=100, random_actions=False)
    finally:
        algo.stop()
    sampled = np.concatenate([episode.get_actions() for episode in episodes])
    got = np.stack([info["action"] for episode in episodes for info in episode.get_infos()[1:]])
    low, high = ActionReport.action_space.low, ActionReport.action_space.high
    mapped = low + (sampled + 1.0) * (high - low) / 2.0 if normalize_actions else sampled
    expected = np.clip(mapped, low, high)
    assert ((expected > low) & (expected < high)).all(axis=1).sum() >= 5  # some not at a bound
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
