"""GePPO on RLlib's old API stack: the same math as the new stack, training, checkpoints (the
command line runs it in tests/cli/test_cli.py's shared run)."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.models import ModelCatalog
from ray.rllib.models.torch.torch_modelv2 import TorchModelV2
from ray.rllib.policy.sample_batch import DEFAULT_POLICY_ID
from torch import nn

from rllib_geppo import GePPO, GePPOConfig, GePPOTorchPolicy
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.objective import adapt_lr, standardize_advantages
from rllib_geppo.core.segments import Segment, lay_out
from rllib_geppo.core.update_inputs import UpdateInputs
from rllib_geppo.old_stack.training_step import batch_segments, update_policy

from helpers import METRICS, check_lr_rule, check_run_metrics

pytestmark = pytest.mark.usefixtures("local_ray")


def old_stack(config: GePPOConfig) -> GePPOConfig:
    return config.api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)


def small_config(env: str = "Pendulum-v1", **training) -> GePPOConfig:
    """The defaults (2 envs on one RolloutWorker) on the old stack, with a small batch and few
    gradient steps."""
    return old_stack(
        GePPOConfig()
        .environment(env)
        .env_runners(num_env_runners=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=256, num_epochs=2, num_minibatches=4, **training)
    )


def learner_stats(result: dict) -> dict:
    return result["info"]["learner"][DEFAULT_POLICY_ID]["learner_stats"]


def test_old_stack_selects_the_geppo_policy():
    config = old_stack(GePPOConfig().environment("Pendulum-v1"))
    config.validate()
    assert GePPO.get_default_policy_class(config) is GePPOTorchPolicy


# -- Same batch, same weights: same targets, loss and gradients on both stacks ---------------


def chunks(rng: np.random.Generator) -> list[Segment]:
    """Two Pendulum trajectory chunks from different policy versions: one terminated, one cut."""
    return [
        Segment(
            obs=(rng.normal(size=(steps + 1, 3)) * 2 + 1).astype(np.float32),
            actions=rng.normal(size=(steps, 1)).astype(np.float32),
            rewards=(rng.normal(size=steps) * 5).astype(np.float32),
            behaviour_logp=(rng.normal(size=steps) * 0.3 - 1.5).astype(np.float32),
            versions=np.full(steps, version),
            terminated=terminated,
        )
        for steps, terminated, version in ((7, True, 3), (5, False, 4))
    ]


@pytest.mark.parametrize("entropy_coeff", [0.0, 0.5])
def test_targets_loss_and_gradients_equal_the_new_stack(entropy_coeff):
    env = gym.make("Pendulum-v1")
    config = GePPOConfig().environment("Pendulum-v1").training(entropy_coeff=entropy_coeff)
    learner = config.build_learner(env=env)
    module = learner.module[DEFAULT_MODULE_ID]
    module.set_obs_stats(np.array([0.5, -0.2, 1.0]), np.array([1.5, 0.7, 2.0]))
    policy = GePPOTorchPolicy(env.observation_space, env.action_space, old_stack(config).to_dict())
    policy.model.module.load_state_dict(module.state_dict())
    layout = lay_out(chunks(np.random.default_rng(0)))
    inputs = UpdateInputs(
        policy_lr=3e-4,
        clip_eps=0.1,
        weights_by_version={3: 0.8, 4: 1.3},
        reward_scale=2.0,
        obs_mean=np.zeros(3),
        obs_std=np.ones(3),
        minibatches_per_epoch=1,
        shuffle_seed=0,
        entropy_coeff=entropy_coeff,
    )

    new = learner.prepare_update(DEFAULT_MODULE_ID, layout, inputs)
    policy.begin_update(inputs)
    old = policy.compute_targets(layout, inputs)
    for key in (C.ADVANTAGES, C.VALUE_TARGETS, C.CENTER, C.SAMPLE_WEIGHTS, C.PIK_DIST_INPUTS):
        torch.testing.assert_close(old[key], new[key], rtol=1e-5, atol=1e-6, msg=key)
    assert (old[C.CENTER] - 1).abs().min() > 1e-3  # real V-trace traces

    # The new stack standardises the advantages of every minibatch of an epoch before its steps.
    minibatch = {
        **new,
        C.ADVANTAGES: standardize_advantages(new[C.ADVANTAGES], new[C.CENTER], new[C.SAMPLE_WEIGHTS]),
    }
    new_loss = sum(learner.minibatch_losses(DEFAULT_MODULE_ID, minibatch, inputs.clip_eps))
    old_loss = sum(policy.loss(policy.model, policy.dist_class, old))
    torch.testing.assert_close(old_loss, new_loss, rtol=1e-5, atol=1e-7)
    if entropy_coeff:  # the old stack takes the bonus too: -c * mean(w * H) on top of c = 0's loss
        policy.begin_update(UpdateInputs(**{**vars(inputs), "entropy_coeff": 0.0}))
        with torch.no_grad():
            plain = sum(policy.loss(policy.model, policy.dist_class, old))
            dist = policy.dist_class(policy.model(old)[0], policy.model)
            bonus = (old[C.SAMPLE_WEIGHTS] * dist.entropy()).mean()
        assert bonus.abs() > 0.1
        torch.testing.assert_close(old_loss.detach(), plain - entropy_coeff * bonus)
    new_loss.backward()
    old_loss.backward()
    old_params = dict(policy.model.module.named_parameters())
    for name, param in module.named_parameters():
        torch.testing.assert_close(old_params[name].grad, param.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_one_update_ends_at_the_same_parameters_and_metrics_on_both_stacks():
    """The same store, weights, inputs and shuffle seed: after one update (2 epochs x 4
    minibatches) both stacks hold the same parameters, and report the same losses (means over
    the update's steps), TV and entropy, within 1e-5. Both take autograd's step with one Adam of
    two parameter groups (the new stack's hand-derived step is held to it in tests/learner)."""
    env = gym.make("Pendulum-v1")
    config = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .training(hand_derived_step=False, compile_learner=False, num_epochs=2)
    )
    learner = config.build_learner(env=env)
    module = learner.module[DEFAULT_MODULE_ID]
    module.set_obs_stats(np.array([0.5, -0.2, 1.0]), np.array([1.5, 0.7, 2.0]))
    policy = GePPOTorchPolicy(env.observation_space, env.action_space, old_stack(config).to_dict())
    policy.model.module.load_state_dict(module.state_dict())
    rng = np.random.default_rng(1)
    layout = lay_out([chunk for _ in range(8) for chunk in chunks(rng)])  # 96 steps of 2 versions
    inputs = UpdateInputs(
        policy_lr=3e-3,
        clip_eps=0.1,
        weights_by_version={3: 0.8, 4: 1.3},
        reward_scale=2.0,
        obs_mean=np.array([0.5, -0.2, 1.0]),
        obs_std=np.array([1.5, 0.7, 2.0]),
        minibatches_per_epoch=4,
        shuffle_seed=7,
    )
    new, _ = learner.update_module(DEFAULT_MODULE_ID, layout, inputs)
    old, _ = update_policy(policy, layout, inputs, config)
    assert (new["num_gradient_steps"], old["num_gradient_steps"]) == (8, 8)
    old_params = dict(policy.model.module.named_parameters())
    for name, param in module.named_parameters():
        torch.testing.assert_close(old_params[name], param, rtol=1e-5, atol=1e-6, msg=name)
    for key in ("policy_loss", "vf_loss", "tv", "entropy"):
        assert old[key] == pytest.approx(new[key], rel=1e-5, abs=1e-7), key
    assert new["tv"] > 1e-3  # the update moved the policy


# -- Training with a remote rollout worker ----------------------------------------------------


@pytest.fixture(scope="module")
def built():
    """GePPO on Pendulum with one remote RolloutWorker: the algo, and what it held as built."""
    algo = small_config().build_algo()
    yield algo, before_training(algo)
    algo.stop()


@pytest.fixture(scope="module")
def pendulum_run(built):
    """Four iterations of the built algo (after `built`'s sample of 64 steps: they start
    mid-episode); the algo and the results."""
    algo, _ = built
    return algo, [algo.train() for _ in range(4)]


def before_training(algo) -> dict:
    """The driver's and the remote worker's weights as built, and pi_0 / mu of a first batch from
    the remote worker."""
    local = {name: np.array(value) for name, value in algo.get_policy().get_weights().items()}  # copies
    [remote] = algo.env_runner_group.foreach_env_runner(
        lambda worker: worker.get_policy().get_weights(), local_env_runner=False
    )
    batch = synchronous_parallel_sample(worker_set=algo.env_runner_group, max_env_steps=64)
    batch = batch.as_multi_agent().policy_batches[DEFAULT_POLICY_ID]
    pi0 = algo.get_policy().compute_log_likelihoods(batch["actions"], batch["obs"])
    return {"local": local, "remote": remote, "ratio": np.exp(pi0.numpy() - batch["action_logp"])}


def test_metrics_present_and_finite(pendulum_run):
    algo, results = pendulum_run
    assert isinstance(algo.get_policy(), GePPOTorchPolicy)
    check_run_metrics(results, [learner_stats(r) for r in results], batch_size=256)


def test_policy_lr_follows_the_tv_rule(pendulum_run):
    algo, results = pendulum_run
    stats = [learner_stats(r) for r in results]
    check_lr_rule(stats)
    assert algo.module_state().policy_lr == pytest.approx(
        adapt_lr(stats[-1]["policy_lr"], stats[-1]["tv"], 0.1)
    )


def test_targets_are_recomputed_under_the_current_policy(pendulum_run):
    algo, _ = pendulum_run
    policy = algo.get_policy()
    # The workers ship no advantages: every update computes them on the store.
    assert C.ADVANTAGES not in algo.module_state().store.batches[-1].layout
    # A fresh batch from the remote worker comes from the driver's policy (weights, observation
    # statistics, raw unclipped actions): pi_k / mu = 1. Except the first step of each env's
    # fragment: RolloutWorkers pick the action after a fragment's last step before returning it,
    # with the old weights.
    fresh = synchronous_parallel_sample(worker_set=algo.env_runner_group, max_env_steps=64)
    fresh = fresh.as_multi_agent().policy_batches[DEFAULT_POLICY_ID]
    fresh_layout = lay_out(batch_segments(fresh, version=0))
    inputs = algo.stores.update_inputs(DEFAULT_MODULE_ID)
    batch = policy.compute_targets(
        fresh_layout, UpdateInputs(**{**vars(inputs), "weights_by_version": {0: 1.0}})
    )
    moved = (batch[C.CENTER] - 1).abs() > 1e-5
    assert moved.sum() <= algo.config.num_envs_per_env_runner
    layout = algo.module_state().store.update_layout()
    old = policy.compute_targets(layout, inputs)
    assert (old[C.CENTER] - 1).abs().max() > 1e-3
    sample_versions = layout[C.VERSION][layout[C.LOSS_MASK].astype(bool)]  # the 1,024 samples
    versions, counts = np.unique(sample_versions, return_counts=True)  # oldest first
    assert counts.tolist() == [256] * 4
    nu = np.array([0.1, 0.2, 0.3, 0.4]) * 4
    expected = nu[np.searchsorted(versions, sample_versions)]  # each sample by its batch's age
    torch.testing.assert_close(old[C.SAMPLE_WEIGHTS], torch.as_tensor(expected, dtype=torch.float32))


def test_checkpoint_round_trip(pendulum_run, tmp_path):
    algo, _ = pendulum_run
    algo.save_checkpoint(str(tmp_path))
    restored = Algorithm.from_checkpoint(str(tmp_path))
    try:
        assert restored.module_state().policy_lr == algo.module_state().policy_lr
        assert [b.version for b in restored.module_state().store.batches] == [
            b.version for b in algo.module_state().store.batches
        ]
        np.testing.assert_allclose(restored.module_state().obs_stats.mean, algo.module_state().obs_stats.mean)
        np.testing.assert_allclose(
            restored.module_state().return_stats.var, algo.module_state().return_stats.var
        )
        before, after = algo.get_policy().get_weights(), restored.get_policy().get_weights()
        for key in before:  # includes the model's observation statistics
            np.testing.assert_allclose(after[key], before[key])
        assert restored.policy_version == algo.policy_version == 4
        restored.train()
        assert [b.version for b in restored.module_state().store.batches] == [1, 2, 3, 4]
    finally:
        restored.stop()


# -- A custom ModelV2 with a value branch -------------------------------------------------------


class TwoBranchModel(TorchModelV2, nn.Module):
    """Separate policy and value MLPs, the usual custom-model layout."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        obs_dim = int(np.prod(obs_space.shape))
        self.policy_branch = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, num_outputs))
        self.value_branch = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, 1))
        self._obs = None

    def forward(self, input_dict, state, seq_lens):
        self._obs = input_dict["obs_flat"].float()
        return self.policy_branch(self._obs), state

    def value_function(self):
        return self.value_branch(self._obs).squeeze(-1)


def test_custom_model_v2_trains_with_its_value_branch_in_its_own_group():
    ModelCatalog.register_custom_model("geppo_two_branch", TwoBranchModel)
    config = (
        small_config("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(model={"custom_model": "geppo_two_branch"})
    )
    algo = config.build_algo()
    try:
        policy = algo.get_policy()
        assert isinstance(policy.model, TwoBranchModel)
        _, value_group = policy.adam.param_groups  # one Adam, as the new stack's: policy, value
        value_params = value_group["params"]
        assert {id(p) for p in value_params} == {id(p) for p in policy.model.value_branch.parameters()}
        results = [algo.train() for _ in range(2)]
        assert all(math.isfinite(learner_stats(results[-1])[k]) for k in METRICS)
        assert learner_stats(results[-1])["num_policies"] == 2
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "setting,value", [("overlap_sampling", True), ("grad_clip_scope", "all"), ("stagger_starts", True)]
)
def test_new_stack_only_settings_are_rejected_before_ray_starts(setting, value):
    config = old_stack(GePPOConfig().environment("Pendulum-v1")).training(**{setting: value})
    with pytest.raises(ValueError, match=f"`{setting}={value!r}` runs on the new API stack only"):
        config.validate()
    old_stack(GePPOConfig().environment("Pendulum-v1")).validate()  # "auto": synchronous there


def test_fcnet_settings_in_the_old_model_dict_are_rejected():
    env = gym.make("Pendulum-v1")
    config = old_stack(GePPOConfig()).training(model={"fcnet_hiddens": [32]})
    with pytest.raises(ValueError, match="takes `fcnet_hiddens` from `model_config`"):
        GePPOTorchPolicy(env.observation_space, env.action_space, config.to_dict())


def test_the_remote_rollout_worker_starts_with_the_driver_s_weights(built):
    """Each RolloutWorker builds its policy with its own initial weights; GePPO's pi_0 is the
    driver's, and the first batch's behaviour policy must be it, so that pi_0 / mu = 1."""
    _, record = built
    assert record["local"].keys() == record["remote"].keys()
    for name, value in record["local"].items():
        np.testing.assert_array_equal(record["remote"][name], value, err_msg=name)
    np.testing.assert_allclose(record["ratio"], 1.0, rtol=1e-5)


def test_rllib_s_mean_std_filter_gives_way_to_the_default_model_s_own_normalisation():
    config = small_config().env_runners(observation_filter="MeanStdFilter")
    config.validate()  # what Algorithm runs before its workers read the filter from the config
    assert config.observation_filter == "NoFilter"  # the model's running statistics take its place
    custom = small_config().env_runners(observation_filter="MeanStdFilter")
    custom.training(model={"custom_model": "my_model"}).validate()
    assert custom.observation_filter == "MeanStdFilter"  # a custom ModelV2 keeps the filter


def test_schedules_set_each_update_from_the_env_steps_sampled():
    """As on the new stack: an lr schedule (the lr rule off) and an entropy schedule, read at
    the env steps sampled before each update."""
    config = small_config(
        adaptive_lr=False, lr=[[0, 1e-3], [1024, 1e-4]], entropy_coeff=[[0, 0.5], [512, 0.0]]
    )
    algo = config.env_runners(num_env_runners=0).build_algo()
    try:
        stats = [learner_stats(algo.train()) for _ in range(3)]
        assert algo.get_policy().entropy_coeff == 0.0  # past 512 env steps
    finally:
        algo.stop()
    assert [s["policy_lr"] for s in stats] == pytest.approx([7.75e-4, 5.5e-4, 3.25e-4])
