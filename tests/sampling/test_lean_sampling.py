"""The EnvRunner's lean sampling loop (rllib_geppo/sampling/lean_sampling.py) and its numpy
actor (rllib_geppo.sampling.numpy_actor.py): the same episodes, metrics and callbacks as RLlib's
loop, and RLlib's loop wherever the lean one does not serve."""

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers.vector import DictInfoToList
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.env_to_module import FlattenObservations
from ray.rllib.core.columns import Columns

from rllib_geppo import GePPOConfig
from rllib_geppo.sampling.env_runner import GePPOEnvRunner
from rllib_geppo.sampling.lean_sampling import infos_as_list, lean_sampling_problem, numpy_policy
from rllib_geppo.sampling.numpy_actor import sample_actions
from rllib_geppo.sampling.pipelines import diag_gaussian_sample


def runner_config(env: str = "Pendulum-v1", num_envs: int = 2, **model) -> GePPOConfig:
    config = (
        GePPOConfig()
        .environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs)
        .debugging(seed=0)
    )
    return config.rl_module(model_config=model) if model else config


def moved_statistics(runner: GePPOEnvRunner) -> None:
    """Observation statistics and a log-std away from their initial values, so that the
    actor's use of each shows."""
    module = runner.module
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        module.obs_mean.copy_(torch.randn(module.obs_mean.shape, generator=generator) * 0.1)
        module.obs_std.copy_(torch.rand(module.obs_std.shape, generator=generator) + 0.5)
        module.log_std.copy_(torch.tensor([-0.7] * module.log_std.numel()))


@pytest.mark.parametrize("activation", ["tanh", "relu", "linear"])
def test_numpy_actor_is_the_modules_forward_and_rllibs_gaussian(activation):
    """From the same generator state, the numpy actor gives the module's distribution inputs
    and the actions and log-probs of the fused pipeline's Gaussian, to float32 rounding."""
    runner = GePPOEnvRunner(
        config=runner_config("Hopper-v5", fcnet_activation=activation, fcnet_hiddens=[32, 16])
    )
    moved_statistics(runner)
    module = runner.module
    obs = np.random.default_rng(0).normal(size=(5, 11)) * 3  # float64, some beyond the clip
    lean_rng, torch_rng = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    noise = torch.randn((5, 3), generator=lean_rng).numpy()
    actions, logp, dist_inputs = sample_actions(numpy_policy(module), obs, noise)
    with torch.no_grad():
        expected_inputs = module._forward({Columns.OBS: torch.from_numpy(obs).float()})[
            Columns.ACTION_DIST_INPUTS
        ]
        expected_actions, expected_logp = diag_gaussian_sample(expected_inputs, torch_rng)
    for got, expected in ((dist_inputs, expected_inputs), (actions, expected_actions), (logp, expected_logp)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
    assert torch.equal(lean_rng.get_state(), torch_rng.get_state())  # the same draws used up
    runner.stop()


class CountingCallback(RLlibCallback):
    """A user's callbacks: counts episode steps and keeps each step's info keys."""

    def __init__(self):
        super().__init__()
        self.counts = {"start": 0, "step": 0, "end": 0}
        self.info_keys = set()

    def on_episode_start(self, *, episode, **kwargs):
        self.counts["start"] += 1

    def on_episode_step(self, *, episode, **kwargs):
        self.counts["step"] += 1
        self.info_keys |= set(episode.get_infos(-1))

    def on_episode_end(self, *, episode, **kwargs):
        self.counts["end"] += 1


#: The DeepMind Control Suite's tasks, where the dmc extra is installed.
DMC = pytest.mark.skipif(importlib.util.find_spec("dm_control") is None, reason="needs the dmc extra")


@pytest.mark.parametrize(
    "env", ["Pendulum-v1", "InvertedPendulum-v5", pytest.param("dm_control/cartpole-swingup-v0", marks=DMC)]
)
def test_lean_loop_samples_what_rllibs_loop_samples(env):
    """Same seed and weights: the lean loop gives RLlib's loop's episodes (truncated ones on
    Pendulum and the suite's cartpole, terminated ones on InvertedPendulum, cut ones on all,
    over 2 envs and two calls) to float32 rounding, the same episode metrics, and makes the same
    callbacks."""
    # The suite's episodes last 2.5 s of simulation here (250 steps), not 10.
    env_config = {"task_kwargs": {"time_limit": 2.5}} if env.startswith("dm_control/") else {}
    runners = {}
    for path in ("lean", "general"):
        config = runner_config(env).environment(env_config=env_config).callbacks(CountingCallback)
        runner = GePPOEnvRunner(config=config)
        runner.lean_sampling = path == "lean"
        runners[path] = runner
    moved_statistics(runners["lean"])
    runners["general"].module.load_state_dict(runners["lean"].module.state_dict())
    samples = {}
    for path, runner in runners.items():
        episodes = runner.sample(num_timesteps=300) + runner.sample(num_timesteps=300)
        assert runner.sampling_path == path
        samples[path] = (episodes, runner.get_metrics(), runner._callbacks[0])
    (lean, lean_metrics, lean_callback), (general, general_metrics, general_callback) = samples.values()
    assert [len(e) for e in lean] == [len(e) for e in general]
    assert any(e.is_done for e in lean) and not all(e.is_done for e in lean)
    for a, b in zip(lean, general):
        assert (a.is_terminated, a.is_truncated, a.t_started) == (
            b.is_terminated,
            b.is_truncated,
            b.t_started,
        )
        for column in (Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS, "weights_seq_no"):
            np.testing.assert_allclose(
                a.get_extra_model_outputs(column), b.get_extra_model_outputs(column), rtol=1e-4, atol=1e-4
            )
        for get in ("get_observations", "get_actions", "get_rewards"):
            np.testing.assert_allclose(getattr(a, get)(), getattr(b, get)(), rtol=1e-4, atol=1e-4)
        assert a.get_infos() == b.get_infos() or env != "Pendulum-v1"  # infos of floats or arrays
        assert [sorted(i) for i in a.get_infos()] == [sorted(i) for i in b.get_infos()]
    for key in ("num_episodes", "num_env_steps_sampled"):
        assert lean_metrics[key].peek() == general_metrics[key].peek()
    assert lean_metrics["episode_return_mean"].peek() == pytest.approx(
        general_metrics["episode_return_mean"].peek(), rel=1e-4
    )
    assert lean_callback.counts == general_callback.counts and lean_callback.counts["step"] > 500
    assert lean_callback.info_keys == general_callback.info_keys
    for runner in runners.values():
        runner.stop()


@pytest.mark.parametrize(
    ("config", "explore", "reason"),
    [
        (runner_config("CartPole-v1"), True, "not a Box"),
        (runner_config(), False, "explore=False"),
        (runner_config(fcnet_activation="elu"), True, "activation 'elu'"),
        (
            runner_config().env_runners(
                env_to_module_connector=lambda env, spaces, device: FlattenObservations()
            ),
            True,
            "connectors",
        ),
    ],
)
def test_what_the_lean_loop_does_not_serve_takes_rllibs_loop(config, explore, reason):
    runner = GePPOEnvRunner(config=config)
    assert reason in lean_sampling_problem(runner, explore=explore)
    runner.sample(num_timesteps=20, explore=explore)
    assert runner.sampling_path == "general"
    runner.stop()


def test_infos_as_list_is_gymnasiums_dict_info_to_list():
    """Masked, unmasked and nested info keys, as DictInfoToList splits them per env."""
    infos = {
        "x": np.array([1.0, 2.0, 3.0]),
        "_x": np.array([True, False, True]),
        "y": np.array([4, 5, 6]),
        "final": {"r": np.array([0.5, 0.0, 0.0]), "_r": np.array([True, False, False])},
        "_final": np.array([True, False, False]),
    }
    expected = DictInfoToList(gym.make_vec("CartPole-v1", num_envs=3))._convert_info_to_list(infos)
    assert infos_as_list(infos, 3) == expected
    assert expected[0] == {"x": 1.0, "y": 4, "final": {"r": 0.5}}
