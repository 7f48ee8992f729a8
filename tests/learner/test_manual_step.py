"""The hand-derived minibatch step against GePPO's learner (autograd, its clip and check, torch's
fused Adam) on the same weights and minibatches: the same parameters after one step within
1e-5 relative, after many within 1e-3."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.manual_step import ManualStep
from rllib_geppo.learner.torch_learner import manual_step_for


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


def learner_and_manual(env_id: str, **training):
    env = gym.make(env_id)
    activation = training.pop("act", "tanh")
    config = GePPOConfig().environment(env_id).training(compile_learner=False, **training)
    config.rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": activation})
    learner = config.build_learner(env=env)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    rng = np.random.default_rng(1)
    module.set_obs_stats(
        rng.normal(size=env.observation_space.shape), rng.uniform(0.5, 2, env.observation_space.shape)
    )
    manual = manual_step_for(learner, DEFAULT_MODULE_ID)
    return env, learner, module, manual


def assert_same_parameters(module, manual: ManualStep, rtol: float) -> None:
    linears = [m for m in module.pi if isinstance(m, torch.nn.Linear)]
    expected = [p for m in linears for p in (m.weight, m.bias)] + [module.log_std]
    expected += [p for m in module.vf if isinstance(m, torch.nn.Linear) for p in (m.weight, m.bias)]
    got = [*manual.pi.params, *manual.vf.params]
    for e, g in zip(expected, got, strict=True):  # relative to each tensor's norm
        assert torch.linalg.vector_norm(g - e.detach()) <= rtol * torch.linalg.vector_norm(e.detach())


@pytest.mark.parametrize(
    ("env_id", "training"),
    [
        ("Hopper-v5", {}),
        ("Pendulum-v1", {"act": "relu", "entropy_coeff": 0.05, "vf_clip_param": 1.0}),
        ("Hopper-v5", {"grad_clip": None, "act": "linear"}),
    ],
)
def test_the_hand_step_takes_the_learners_steps(env_id, training):
    env, learner, module, manual = learner_and_manual(env_id, **training)
    batches = minibatches(env, 128, 20)
    for i, mb in enumerate(batches):
        losses, finite = learner.minibatch_step(DEFAULT_MODULE_ID, mb, 0.1)
        policy_loss, value_loss, taken = manual.step(
            mb[C.OBS],
            mb[C.ACTIONS],
            mb[C.BEHAVIOUR_LOGP],
            mb[C.CENTER],
            mb[C.ADVANTAGES],
            mb[C.VALUE_TARGETS],
            mb[C.SAMPLE_WEIGHTS],
            0.1,
        )
        assert bool(finite) and bool(taken)
        torch.testing.assert_close(policy_loss, losses[0], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(value_loss, losses[1], rtol=1e-4, atol=1e-6)
        if i == 0:
            assert_same_parameters(module, manual, rtol=1e-5)
    assert_same_parameters(module, manual, rtol=1e-3)


def test_a_step_that_is_not_finite_is_skipped():
    env, learner, module, manual = learner_and_manual("Pendulum-v1")
    [mb] = minibatches(env, 64, 1)
    before = manual.pi.flat.clone(), manual.vf.flat.clone()
    mb[C.VALUE_TARGETS][3] = math.nan
    *_, taken = manual.step(
        *(
            mb[k]
            for k in (
                C.OBS,
                C.ACTIONS,
                C.BEHAVIOUR_LOGP,
                C.CENTER,
                C.ADVANTAGES,
                C.VALUE_TARGETS,
                C.SAMPLE_WEIGHTS,
            )
        ),
        0.1,
    )
    assert not bool(taken)
    assert torch.equal(manual.pi.flat, before[0]) and torch.equal(manual.vf.flat, before[1])
    assert manual.pi_adam.step_count.item() == 0
