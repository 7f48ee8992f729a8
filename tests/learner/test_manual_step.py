"""The hand-derived minibatch step against GePPO's general step (autograd, its clip and check,
torch's fused Adam) on the same weights and minibatches: the same parameters after one step
within 1e-5 (relative to each tensor's norm, plus 1e-3 lr), after 20 steps and after a whole update within
1e-3; and the modules and settings that take it."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rllib_geppo import GePPOConfig, GeTRPOConfig
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.segments import Segment, lay_out
from rllib_geppo.learner.learner import OPTIMIZER
from rllib_geppo.learner.step_path import StepChoice
from rllib_geppo.learner.torch_learner import hand_step_for

from helpers import update_inputs


def minibatches(env: gym.Env, rows: int, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    high = torch.as_tensor(env.action_space.high)
    return [
        {
            C.OBS: 3 * torch.randn(rows, obs_dim, generator=g),
            C.ACTIONS: high * torch.randn(rows, act_dim, generator=g),
            C.BEHAVIOUR_LOGP: torch.randn(rows, generator=g) - 2 * act_dim,
            C.CENTER: torch.exp(0.1 * torch.randn(rows, generator=g)),
            C.ADVANTAGES: torch.randn(rows, generator=g),
            C.VALUE_TARGETS: 2 * torch.randn(rows, generator=g),
            C.SAMPLE_WEIGHTS: torch.rand(rows, generator=g) + 0.5,
        }
        for _ in range(count)
    ]


def build(env_id: str, activation: str = "tanh", config_class=GePPOConfig, **training):
    torch.manual_seed(0)  # the initial weights, whatever tests ran before in this process
    env = gym.make(env_id)
    config = config_class().environment(env_id).training(**{"compile_learner": False, **training})
    config.rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": activation})
    learner = config.build_learner(env=env)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    rng = np.random.default_rng(1)
    shape = env.observation_space.shape
    module.set_obs_stats(rng.normal(size=shape), rng.uniform(0.5, 2, shape))
    return env, config, learner, module


def parameters(module) -> list[torch.Tensor]:
    """The module's parameters in the hand step's layout: each MLP's layers, then the log-std."""
    pi = [p for m in module.pi if isinstance(m, torch.nn.Linear) for p in (m.weight, m.bias)]
    vf = [p for m in module.vf if isinstance(m, torch.nn.Linear) for p in (m.weight, m.bias)]
    return [p.detach().clone() for p in [*pi, module.log_std, *vf]]


def hand_params(manual) -> list[torch.Tensor]:
    """The hand step's current weights, each shaped as its parameter: the policy's MLP, its
    log-std, then the value MLP."""
    (pi_layout, vf_layout), (pi, vf) = manual.layouts, manual.flats
    return [*pi_layout.unflatten(pi), *vf_layout.unflatten(vf)]


#: The hand step, eager: what a test builds beside a learner whose own step is the general one.
EAGER_HAND_STEP = StepChoice("hand_eager", None)


def assert_close_by_norm(
    got: list[torch.Tensor], expected: list[torch.Tensor], rtol: float, atol: float = 0.0
) -> None:
    for g, e in zip(got, expected, strict=True):
        assert torch.linalg.vector_norm(g - e) <= rtol * torch.linalg.vector_norm(e) + atol


@pytest.mark.parametrize(
    ("env_id", "activation", "training"),
    [
        ("Hopper-v5", "tanh", {}),
        ("Pendulum-v1", "relu", {"entropy_coeff": 0.05, "vf_clip_param": 1.0}),
        ("Hopper-v5", "linear", {"grad_clip": None}),
    ],
)
def test_the_hand_step_takes_the_general_steps(env_id, activation, training):
    env, config, learner, module = build(env_id, activation, hand_derived_step=False, **training)
    manual = hand_step_for(module, config, EAGER_HAND_STEP)  # its own copy of the weights, from here on
    optimizer = learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER)
    policy_group, value_group = optimizer.param_groups
    manual.begin(
        optimizer, policy_lr=policy_group["lr"], vf_lr=value_group["lr"], entropy_coeff=config.entropy_coeff
    )
    clip_eps, take = torch.tensor(0.1), torch.tensor(True)
    for i, mb in enumerate(minibatches(env, 128, 20)):
        stats, finite = learner.minibatch_step(DEFAULT_MODULE_ID, mb, clip_eps)
        hand_stats, hand_finite = manual.step(mb, clip_eps, take)
        assert bool(finite) and bool(hand_finite)
        torch.testing.assert_close(hand_stats, stats, rtol=1e-4, atol=1e-6)
        if i == 0:
            # A zero-initialised bias is all step after one Adam step, lr * g / (|g| + eps): an
            # element whose gradient is near eps turns float32 rounding into up to ~1e-4 lr.
            assert_close_by_norm(
                hand_params(manual), parameters(module), 1e-5, atol=1e-3 * policy_group["lr"]
            )
    assert_close_by_norm(hand_params(manual), parameters(module), 1e-3)


def test_a_step_that_is_not_finite_or_not_taken_changes_nothing():
    env, config, learner, module = build("Pendulum-v1")
    manual = hand_step_for(module, config, EAGER_HAND_STEP)
    manual.begin(
        learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER), policy_lr=3e-4, vf_lr=3e-4, entropy_coeff=0.0
    )
    [good, bad] = minibatches(env, 64, 2)
    bad[C.VALUE_TARGETS][3] = math.nan
    before = hand_params(manual)
    for mb, take in ((bad, True), (good, False)):
        _, finite = manual.step(mb, torch.tensor(0.1), torch.tensor(take))
        assert bool(finite) is (mb is good)
    assert (
        all(map(torch.equal, hand_params(manual), before)) and float(manual.adam[2]) == 0
    )  # no Adam step counted


def layout(env: gym.Env) -> dict:
    rng = np.random.default_rng(0)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    return lay_out(
        [
            Segment(
                obs=rng.normal(size=(257, obs_dim)),
                actions=rng.normal(size=(256, act_dim)),
                rewards=rng.normal(size=256),
                behaviour_logp=rng.normal(-3, 0.5, size=256),
                versions=np.full(256, version),
                terminated=False,
            )
            for version in range(4)
        ]
    )


def two_full_updates(env: gym.Env, *learners) -> None:
    """Two updates of each learner on the same store of 4 versions, 10 epochs x 32 minibatches:
    320 steps each, none skipped."""
    weights = {0: 0.4 / 0.25, 1: 0.3 / 0.25, 2: 0.2 / 0.25, 3: 0.1 / 0.25}
    inputs = update_inputs(
        env.observation_space.shape[0], weights_by_version=weights, minibatches_per_epoch=32
    )
    data = layout(env)
    for learner in learners:
        for _ in range(2):
            metrics, _ = learner.update_module(DEFAULT_MODULE_ID, data, inputs)
            assert (metrics["num_gradient_steps"], metrics["num_skipped_steps"]) == (320, 0)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_whole_update_by_hand_ends_where_the_general_one_does_and_leaves_adam_s_state(compiled):
    """Two updates of 10 epochs x 32 minibatches from the same weights, eager or compiled:
    parameters within 1e-3; the Adam state the hand step writes back is the general step's."""
    env, _, general, module = build("Hopper-v5", hand_derived_step=False)
    _, _, hand, hand_module = build("Hopper-v5", compile_learner=compiled)
    hand_module.load_state_dict(module.state_dict())
    assert general.hand_step(DEFAULT_MODULE_ID) is None and hand.hand_step(DEFAULT_MODULE_ID) is not None
    two_full_updates(env, general, hand)
    assert hand.step_path(DEFAULT_MODULE_ID) == ("hand_aot" if compiled else "hand_eager")
    assert_close_by_norm(parameters(hand_module), parameters(module), 1e-3)
    states = [
        [learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER).state[p] for p in m.parameters()]
        for learner, m in ((general, module), (hand, hand_module))
    ]
    for g, h in zip(*states, strict=True):
        assert float(h["step"]) == float(g["step"]) == 640
        assert_close_by_norm([h["exp_avg_sq"]], [g["exp_avg_sq"]], 1e-2)


def value_parameters(module) -> list[torch.Tensor]:
    return [p for m in module.vf if isinstance(m, torch.nn.Linear) for p in (m.weight, m.bias)]


def test_getrpo_s_critic_by_hand_ends_where_autograd_s_does():
    """Two GeTRPO updates (10 epochs x 32 critic steps, then the policy's natural-gradient step)
    from the same weights, the critic's steps by hand and by autograd: the value network within
    1e-3, as the policy, and the Adam state the hand step writes back autograd's (a vf_lr
    other than the policy's, so that the value step must take its own)."""
    env, _, general, module = build(
        "Hopper-v5", config_class=GeTRPOConfig, hand_derived_step=False, vf_lr=1e-3
    )
    _, _, hand, hand_module = build("Hopper-v5", config_class=GeTRPOConfig, vf_lr=1e-3)
    hand_module.load_state_dict(module.state_dict())
    two_full_updates(env, general, hand)
    assert (general.step_path(DEFAULT_MODULE_ID), hand.step_path(DEFAULT_MODULE_ID)) == (
        "general_eager",
        "hand_eager",
    )
    assert all(p.grad is None for p in value_parameters(hand_module))  # no autograd step ran
    # The policy's too: its second step reads advantages under the critic the first update left.
    assert_close_by_norm(parameters(hand_module), parameters(module), 1e-3)
    states = [
        [learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER).state[p] for p in value_parameters(m)]
        for learner, m in ((general, module), (hand, hand_module))
    ]
    for g, h in zip(*states, strict=True):
        assert float(h["step"]) == float(g["step"]) == 640
        assert_close_by_norm([h["exp_avg_sq"]], [g["exp_avg_sq"]], 1e-2)


def test_a_value_step_that_is_not_finite_or_not_taken_changes_nothing():
    _, config, learner, module = build("CartPole-v1", config_class=GeTRPOConfig)
    manual = learner.hand_step(DEFAULT_MODULE_ID)
    manual.begin(learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER), vf_lr=3e-4)
    g = torch.Generator().manual_seed(0)
    good = {
        C.OBS: torch.randn(64, 4, generator=g),
        C.VALUE_TARGETS: torch.randn(64, generator=g),
        C.SAMPLE_WEIGHTS: torch.rand(64, generator=g) + 0.5,
    }
    bad = {**good, C.VALUE_TARGETS: good[C.VALUE_TARGETS].clone()}
    bad[C.VALUE_TARGETS][3] = math.nan
    before = [t.clone() for t in manual.flats]
    for mb, take in ((bad, True), (good, False)):
        _, finite = manual.step(mb, torch.tensor(take))
        assert bool(finite) is (mb is good)
    assert all(map(torch.equal, manual.flats, before)) and float(manual.adam[2]) == 0  # no step counted
    _, finite = manual.step(good, torch.tensor(True))
    assert bool(finite) and not torch.equal(manual.flats[0], before[0]) and float(manual.adam[2]) == 1


def test_getrpo_s_critic_takes_the_hand_step_with_any_action_space():
    """The critic's step has no policy in it (and no gradient clip, which GeTRPO refuses): a
    Discrete policy leaves it the hand-derived step, where GePPO's would not be."""
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        _, _, learner, _ = build(env_id, config_class=GeTRPOConfig)
        assert learner.step_choice(DEFAULT_MODULE_ID).path == "hand_eager"
        assert type(learner.hand_step(DEFAULT_MODULE_ID)).__name__ == "ManualValueStep"
    _, _, learner, _ = build("CartPole-v1", config_class=GeTRPOConfig, hand_derived_step=False)
    assert learner.step_choice(DEFAULT_MODULE_ID).path == "general_eager"
    assert learner.hand_step(DEFAULT_MODULE_ID) is None


@pytest.mark.parametrize(
    ("change", "why_not"),
    [
        ({}, None),
        ({"grad_clip_scope": "all"}, "the gradient clip is not the policy's global norm"),
        ({"hand_derived_step": False}, "hand_derived_step=False"),
        ({"grad_clip_by": "value"}, "the gradient clip is not the policy's global norm"),
    ],
)
def test_the_hand_step_runs_for_geppos_mlp_module_at_its_settings_only(change, why_not):
    _, _, learner, _ = build("Pendulum-v1", **change)
    choice = learner.step_choice(DEFAULT_MODULE_ID)
    assert (learner.hand_step(DEFAULT_MODULE_ID) is not None) is (why_not is None) is choice.hand
    assert choice.passed_over.get("hand_eager") == why_not


def test_a_users_module_takes_the_general_step():
    config = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=DefaultPPOTorchRLModule, catalog_class=PPOCatalog)
        )
    )
    learner = config.build_learner(env=gym.make("Pendulum-v1"))
    assert learner.hand_step(DEFAULT_MODULE_ID) is None
    assert learner.step_choice(DEFAULT_MODULE_ID).passed_over["hand_aot"] == "the RLModule is not GePPO's own"
