"""GePPO on RLlib's new API stack, end to end with real Ray, EnvRunners and Learners."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.env_to_module.observation_preprocessor import SingleAgentObservationPreprocessor
from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate, GeneralAdvantageEstimation
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module import RLModule
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.tune.registry import get_trainable_cls

from rllib_geppo import GePPO, GePPOConfig
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.segments import lay_out
from rllib_geppo.sampling.episode_segments import episode_segment

from envs import TupleActionEnv
from helpers import METRICS, TUNED_EXAMPLES, check_lr_rule, check_run_metrics

pytestmark = pytest.mark.usefixtures("local_ray")


def small_config(env: str = "Pendulum-v1", **training) -> GePPOConfig:
    """The defaults with a small batch and few gradient steps, so a test takes seconds, the
    paper's synchronous loop (overlapped sampling, the default, is tests/algorithm/test_overlap.py's),
    and sampling in the driver: no EnvRunner process to start where remote sampling is not the
    subject."""
    return (
        GePPOConfig()
        .environment(env)
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
        .training(
            train_batch_size_per_learner=256,
            num_epochs=2,
            num_minibatches=4,
            **{"overlap_sampling": False, **training},
        )
    )


def local_learner(algo: GePPO):
    return algo.learner_group._learner


def prepare(algo: GePPO, layout: dict) -> dict:
    """What the local learner's next update would train on (pi_k unchanged), for ``layout``."""
    return local_learner(algo).prepare_update(
        DEFAULT_MODULE_ID, layout, algo.stores.update_inputs(DEFAULT_MODULE_ID)
    )


def fresh_layout(algo: GePPO, steps: int) -> dict:
    episodes = synchronous_parallel_sample(
        worker_set=algo.env_runner_group, max_env_steps=steps, _uses_new_env_runners=True
    )
    return lay_out([episode_segment(e) for e in episodes])


def test_defaults_are_the_papers():
    config = GePPOConfig()
    assert (config.lr, config.vf_lr, config.gamma, config.lambda_) == (3e-4, 3e-4, 0.995, 0.97)
    assert (config.num_epochs, config.num_minibatches, config.train_batch_size_per_learner) == (10, 32, 1024)
    assert (config.grad_clip, config.use_kl_loss, config.entropy_coeff) == (0.5, False, 0.0)
    assert (config.lr_adapt_factor, config.lr_adapt_min_ratio, config.vtrace_clip) == (0.03, 0.5, 1.0)
    assert (
        config.model_config["fcnet_hiddens"] == [64, 64] and config.model_config["fcnet_activation"] == "tanh"
    )
    np.testing.assert_allclose(config.nu, [0.4, 0.3, 0.2, 0.1], atol=1e-6)
    assert config.clip_eps == pytest.approx(0.1)
    assert config.samples_per_iteration == 1024
    assert get_trainable_cls("GePPO") is GePPO


def test_vf_fcnet_hiddens_sizes_the_value_network_alone_on_both_stacks():
    """The paper's wide-network runs (Appendix, "400 and 300 units") widen the policy only."""
    from rllib_geppo.old_stack.torch_policy import GePPOTorchModelV2
    from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule

    obs, act = gym.spaces.Box(-1, 1, (17,)), gym.spaces.Box(-1, 1, (6,))
    wide = {"fcnet_hiddens": [400, 300], "vf_fcnet_hiddens": [64, 64]}
    new = GePPOTorchRLModule(observation_space=obs, action_space=act, model_config=wide)
    old = GePPOTorchModelV2(obs, act, 12, wide, "geppo_model").module

    def widths(net):
        return [layer.out_features for layer in net if isinstance(layer, torch.nn.Linear)]

    for module in (new, old):
        assert widths(module.pi) == [400, 300, 6] and widths(module.vf) == [64, 64, 1]
    same = GePPOTorchRLModule(observation_space=obs, action_space=act, model_config={"fcnet_hiddens": [32]})
    assert widths(same.vf) == [32, 1]  # unset: the policy's sizes
    unset = GePPOTorchRLModule(
        observation_space=obs,
        action_space=act,
        model_config={"fcnet_hiddens": None, "vf_fcnet_hiddens": None},
    )
    assert widths(unset.pi) == [64, 64, 6] and widths(unset.vf) == [64, 64, 1]  # None: the default


@pytest.mark.parametrize(
    "settings,overlaps",
    [
        ({}, True),  # the defaults: one EnvRunner
        ({"num_env_runners": 0}, False),  # the driver samples and learns: nothing to overlap
        ({"sample_reuse": False}, False),  # the PPO baseline stays on-policy
        ({"enable_env_runner_and_connector_v2": False}, False),  # the old API stack
        ({"num_env_runners": 0, "overlap_sampling": True}, True),
        ({"overlap_sampling": False}, False),
    ],
)
def test_overlap_sampling_auto_overlaps_where_there_is_something_to_overlap(settings, overlaps):
    config = GePPOConfig().update_from_dict(settings)
    assert config.overlap_sampling == settings.get("overlap_sampling", "auto")
    assert config.uses_overlapped_sampling is overlaps


def test_sample_reuse_false_is_the_ppo_baseline():
    config = GePPOConfig().training(sample_reuse=False)
    np.testing.assert_array_equal(config.nu, [1.0])
    assert config.clip_eps == pytest.approx(0.2)
    assert config.samples_per_iteration == 2048


@pytest.mark.parametrize(
    "setting,value,message",
    [
        ("batch_multiple", 0, "`batch_multiple` must be an integer >= 1"),
        ("max_policies", 1, r"`max_policies` must be an integer >= 2 \(at least batch_multiple\); got 1"),
        ("policy_weights", "best", "`policy_weights` must be one of"),
        ("policy_weights", [0.5, 0.6], "policy weights must sum to 1"),
        ("weights_tradeoff", 1.5, r"`weights_tradeoff` must be in \[0, 1\]; got 1.5"),
        ("lr", [[0, 1e-3], [1000, 1e-4]], "`lr` is a schedule, but `adaptive_lr=True`"),
        ("vtrace_clip", 0.0, "`vtrace_clip` must be a finite positive number; got 0.0"),
        ("lr_adapt_min_ratio", 2.0, r"`lr_adapt_min_ratio` must be in \[0, 1\]"),
        ("clip_param", 0.0, r"`clip_param` must be in \(0, 1\)"),
        ("num_minibatches", 0, "`num_minibatches` must be an integer >= 1"),
        (
            "train_batch_size_per_learner",
            16,
            r"`train_batch_size_per_learner` must be an integer >= 32 \(at least num_minibatches\)",
        ),
        ("overlap_sampling", "yes", r"`overlap_sampling` must be one of \(True, False, 'auto'\)"),
        ("lag_clip_rule", "lemma3", "`lag_clip_rule` must be one of \\('unlagged', 'bound'\\)"),
    ],
)
def test_bad_settings_fail_validation_with_the_name(setting, value, message):
    config = GePPOConfig().environment("Pendulum-v1").training(**{setting: value})
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_multi_agent_on_the_old_stack_is_rejected():
    config = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .multi_agent(policies={"a", "b"}, policy_mapping_fn=lambda agent_id, *args, **kwargs: "a")
        .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
    )
    with pytest.raises(ValueError, match="multi-agent configs on RLlib's new API stack only"):
        config.validate()


def test_unsupported_action_space_is_named_before_any_env_runner_starts():
    config = GePPOConfig().environment(TupleActionEnv).env_runners(num_env_runners=1)
    with pytest.raises(ValueError, match=r"Nested \(Tuple, Dict\) and multi-dimensional actions") as failure:
        config.build_algo()
    # Raised in GePPO.setup's check, before RLlib's setup creates any EnvRunner.
    assert not [entry for entry in failure.traceback if "env_runner" in str(entry.path)]


@pytest.fixture(scope="module")
def pendulum_run():
    """Four iterations of GePPO on Pendulum with one remote EnvRunner (whose samples must come
    from pi_k's weights: test_fresh_samples_have_unit_ratio_and_old_ones_do_not); the results
    and algo."""
    algo = small_config().env_runners(num_env_runners=1).build_algo()
    results = [algo.train() for _ in range(4)]
    yield algo, results
    algo.stop()


def test_metrics_present_and_finite(pendulum_run):
    _, results = pendulum_run
    check_run_metrics(results, [r["learners"][DEFAULT_MODULE_ID] for r in results], batch_size=256)


def test_policy_lr_follows_the_tv_rule(pendulum_run):
    _, results = pendulum_run
    check_lr_rule([r["learners"][DEFAULT_MODULE_ID] for r in results])


def test_fresh_samples_have_unit_ratio_and_old_ones_do_not(pendulum_run):
    algo, _ = pendulum_run
    fresh = prepare(algo, fresh_layout(algo, 64))
    torch.testing.assert_close(fresh[C.PIK_LOGP], fresh[C.BEHAVIOUR_LOGP], atol=1e-5, rtol=0)
    oldest = prepare(algo, algo.module_state().store.batches[0].layout)
    assert (oldest[C.CENTER] - 1).abs().max() > 1e-3


def test_weights_are_applied_by_age(pendulum_run):
    algo, _ = pendulum_run
    data = prepare(algo, algo.module_state().store.update_layout())
    real = torch.as_tensor(algo.module_state().store.update_layout()[C.LOSS_MASK])
    versions = torch.as_tensor(algo.module_state().store.update_layout()[C.VERSION])[real]
    newest = int(versions.max())
    assert newest == algo.policy_version - 1  # synchronous: the youngest batch is from pi_{k-1}
    for age, nu in enumerate([0.4, 0.3, 0.2, 0.1]):
        rows = versions == newest - age
        assert rows.sum() == 256
        weights = data[C.SAMPLE_WEIGHTS][rows]
        torch.testing.assert_close(weights, torch.full_like(weights, 4 * nu))


def test_checkpoint_round_trip(pendulum_run, tmp_path):
    algo, _ = pendulum_run
    algo.save_to_path(str(tmp_path))
    restored = GePPO.from_checkpoint(str(tmp_path))
    try:
        assert restored.module_state().policy_lr == algo.module_state().policy_lr
        assert [b.version for b in restored.module_state().store.batches] == [
            b.version for b in algo.module_state().store.batches
        ]
        np.testing.assert_allclose(restored.module_state().obs_stats.mean, algo.module_state().obs_stats.mean)
        module = restored.learner_group._learner.module[DEFAULT_MODULE_ID]
        np.testing.assert_allclose(module.obs_mean.numpy(), algo.module_state().obs_stats.mean, rtol=1e-6)
        before = restored.get_module().get_state()
        after = algo.get_module().get_state()
        for key in after:
            np.testing.assert_allclose(before[key], after[key])
        newest = algo.module_state().store.batches[-1].version
        assert restored.policy_version == algo.policy_version == newest + 1
        restored.train()
        assert [b.version for b in restored.module_state().store.batches] == [
            newest - 2,
            newest - 1,
            newest,
            newest + 1,
        ]
        assert restored.module_state().store.ages(restored.policy_version - 1) == [0, 1, 2, 3]
    finally:
        restored.stop()


def test_saved_module_acts_on_raw_observations_alone(pendulum_run, tmp_path):
    algo, _ = pendulum_run
    algo.save_to_path(str(tmp_path))
    module = RLModule.from_checkpoint(str(tmp_path / "learner_group/learner/rl_module/default_policy"))
    raw = torch.as_tensor(
        np.stack(
            [
                algo.module_state().obs_stats.mean + algo.module_state().obs_stats.std,
                algo.module_state().obs_stats.mean,
            ]
        ),
        dtype=torch.float32,
    )
    trained = local_learner(algo).module[DEFAULT_MODULE_ID]
    with torch.no_grad():
        ours = module.forward_inference({Columns.OBS: raw})[Columns.ACTION_DIST_INPUTS]
        theirs = trained.forward_inference({Columns.OBS: raw})[Columns.ACTION_DIST_INPUTS]
        # The statistics live in the module: an identity-normalised copy would act differently.
        unnormalised = module.pi(raw)
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(ours[:, :1], unnormalised)


def test_ppo_baseline_advantages_equal_rllib_gae():
    algo = small_config("CartPole-v1", sample_reuse=False).build_algo()
    try:
        assert algo.module_state().store.capacity == 1
        # One fragment: RLlib's GAE bootstraps where sampling cut an episode, GePPO's store
        # would join that chunk with its continuation.
        episodes = synchronous_parallel_sample(
            worker_set=algo.env_runner_group, max_env_steps=256, _uses_new_env_runners=True
        )
        algo.stores.add(
            DEFAULT_MODULE_ID, [episode_segment(e) for e in episodes], iteration=algo.iteration + 1
        )
        algo.module_state().return_stats.var = np.array(1.0 - 1e-8)  # reward scale 1, to compare with RLlib
        ours = prepare(algo, algo.module_state().store.update_layout())
        # RLlib's own learner pipeline with its GAE piece, on the same episodes and critic.
        learner = local_learner(algo)
        module = learner.module[DEFAULT_MODULE_ID]
        pipeline = algo.config.build_learner_connector(module.observation_space, module.action_space)
        pipeline.prepend(AddOneTsToEpisodesAndTruncate())
        pipeline.append(GeneralAdvantageEstimation(gamma=0.995, lambda_=0.97))
        theirs = pipeline(
            rl_module=learner.module, batch={}, episodes=episodes, shared_data={}, metrics=learner.metrics
        )[DEFAULT_MODULE_ID]
        real = torch.as_tensor(theirs[Columns.LOSS_MASK]).bool()
        torch.testing.assert_close(
            ours[C.VALUE_TARGETS],
            torch.as_tensor(theirs[Postprocessing.VALUE_TARGETS])[real],
            atol=1e-4,
            rtol=1e-5,
        )
    finally:
        algo.stop()


def test_the_scale_preset_trains_with_20_gradient_steps_per_update_and_its_tuned_example_agrees():

    from rllib_geppo.cli.experiment_file import load_experiments, resolve_trials
    from rllib_geppo.presets import SCALE

    [spec] = load_experiments(TUNED_EXAMPLES / "geppo_scale.yaml")
    for trial in resolve_trials(spec):
        assert {key: trial[key] for key in SCALE} == SCALE
    paper = GePPOConfig()
    assert paper.num_epochs * paper.num_minibatches == 320
    algo = (
        GePPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=256, **SCALE)
        .build_algo()
    )
    try:
        results = [algo.train()["learners"][DEFAULT_MODULE_ID] for _ in range(3)]
    finally:
        algo.stop()
    assert [r["num_gradient_steps"] for r in results] == [20, 20, 20]
    assert all(math.isfinite(r[k]) for r in results for k in METRICS)
    assert results[0]["policy_lr"] == SCALE["lr"]


def test_vectorised_envs_keep_versions_segments_and_statistics_exact():
    algo = (small_config(reward_scaling="running_return").env_runners(num_envs_per_env_runner=4)).build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        assert [r["num_env_steps_sampled_lifetime"] for r in results] == [256, 512, 768]
        for age, batch in enumerate(reversed(algo.module_state().store.batches)):
            layout = batch.layout
            assert batch.num_steps == 256 and batch.steps_by_version == {algo.policy_version - 1 - age: 256}
            # Four envs, each cut at the end of every sample: at least four segments per batch.
            assert (~layout[C.LOSS_MASK]).sum() >= 4
        assert algo.module_state().obs_stats.count == 768
        # Each env's episode runs on across samples: one running return per env stays open.
        assert len(algo.module_state().running_returns.get_state()["open"]) == 4
        data = prepare(algo, algo.module_state().store.update_layout())
        assert all(torch.isfinite(t).all() for t in data.values())
        fresh = prepare(algo, fresh_layout(algo, 64))
        torch.testing.assert_close(fresh[C.PIK_LOGP], fresh[C.BEHAVIOUR_LOGP], atol=1e-5, rtol=0)
    finally:
        algo.stop()


def test_diag_gaussian_fast_path_is_rllibs_distribution_bit_for_bit():
    """The EnvRunner's Gaussian sampling draws the same actions as RLlib's TorchDiagGaussian
    from the same generator state and gives the same log-probs, over batches of several envs,
    several action dimensions and extreme stds."""
    from ray.rllib.core.distribution.torch.torch_distribution import TorchDiagGaussian

    from rllib_geppo.sampling.pipelines import diag_gaussian_sample

    inputs = torch.cat([torch.randn(5, 6) * 3, torch.tensor([-7.0, 0.0, 2.0]).repeat(5, 2)], dim=-1)
    fast_rng, stock_rng = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(3):
        actions, logp = diag_gaussian_sample(inputs, fast_rng)
        dist = TorchDiagGaussian.from_logits(inputs)
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(stock_rng.get_state())
            expected = dist.sample()
            stock_rng.set_state(torch.get_rng_state())
        assert torch.equal(actions, expected)
        assert torch.equal(logp, dist.logp(actions))
    assert torch.equal(fast_rng.get_state(), stock_rng.get_state())


class HalveObservations(SingleAgentObservationPreprocessor):
    """A user's env-to-module connector (RLlib's extension point for one): halves each
    observation, written into the episode."""

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        return input_observation_space

    def preprocess(self, observation, episode):
        return observation / 2


@pytest.mark.parametrize(
    ("env", "explore", "user_connector"),
    [
        ("Pendulum-v1", True, False),
        ("CartPole-v1", True, False),
        ("Pendulum-v1", False, False),
        ("Pendulum-v1", True, True),
    ],
)
def test_lean_pipelines_sample_what_rllibs_pipelines_sample(env, explore, user_connector):
    """GePPO's EnvRunner pipelines leave out only RLlib's per-piece bookkeeping: the same
    pieces, seed and weights give the same episodes (cut, truncated and terminated ones, over
    two envs; clipped Gaussian and categorical actions; a user's env-to-module connector, run
    untimed), and no connector timer is logged."""
    config = small_config(env).env_runners(
        num_env_runners=0,
        num_envs_per_env_runner=2,
        env_to_module_connector=(lambda env, spaces, device: HalveObservations()) if user_connector else None,
    )
    lean_runner = SingleAgentEnvRunner(config=config)
    stock_runner = SingleAgentEnvRunner(config=config)
    stock_runner._env_to_module = PPOConfig.build_env_to_module_connector(
        config, env=stock_runner.env, spaces=stock_runner.spaces, device=stock_runner._device
    )
    stock_runner._module_to_env = PPOConfig.build_module_to_env_connector(
        config, env=stock_runner.env, spaces=stock_runner.spaces
    )
    assert type(lean_runner._env_to_module).__name__ == (
        "UntimedEnvToModulePipeline" if user_connector else "FusedEnvToModulePipeline"
    )
    assert type(lean_runner._module_to_env).__name__ == "FusedModuleToEnvPipeline"
    assert type(stock_runner._env_to_module).__name__ == "EnvToModulePipeline"
    stock_runner.module.load_state_dict(lean_runner.module.state_dict())
    samples = []
    for runner in (lean_runner, stock_runner):
        torch.manual_seed(0)
        episodes = runner.sample(num_timesteps=500, explore=explore)
        samples.append((episodes, runner.get_metrics()))
    (lean, lean_metrics), (stock, stock_metrics) = samples
    assert [len(e) for e in lean] == [len(e) for e in stock] and sum(map(len, lean)) == 500
    assert any(e.is_done for e in lean) and not all(e.is_done for e in lean)
    for a, b in zip(lean, stock):
        np.testing.assert_array_equal(a.get_observations(), b.get_observations())
        np.testing.assert_array_equal(a.get_actions(), b.get_actions())
        np.testing.assert_array_equal(a.get_rewards(), b.get_rewards())
        assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)
        for column in (Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS):
            np.testing.assert_array_equal(
                a.get_extra_model_outputs(column), b.get_extra_model_outputs(column)
            )
    for timers in ("env_to_module_connector", "module_to_env_connector"):
        assert timers in stock_metrics and timers not in lean_metrics
    for runner in (lean_runner, stock_runner):
        runner.stop()
