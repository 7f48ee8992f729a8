"""One trial on many samplers and learners: the scale rule for the batch, and several learners
(data-parallel on CPU) that take the update one learner takes, for any episode length.

HalfCheetah's 1,000-step episodes, cut by 2 envs at 384 steps per iteration, leave fewer joined
episodes in the store than learners; CartPole's episodes end at every length. On the same store
and weights, 2 and 3 learners take the same gradient steps as one (to float rounding), each on
its slice of every global minibatch, and then train on their own.
"""

import dataclasses
import math

import numpy as np
import pytest
import torch
from ray.rllib.core import COMPONENT_LEARNER_GROUP, DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import NUM_MODULE_STEPS_TRAINED

from rllib_geppo import GePPOConfig
from rllib_geppo.algorithm.geppo import COMPONENT_GEPPO
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.minibatches import learner_slice, minibatch_shape

from helpers import METRICS

STEPS_PER_ITERATION = 768  # 384 per env: a HalfCheetah episode spans 3 iterations
EPOCHS, MINIBATCHES = 2, 5  # 1,536 stored rows: 5 minibatches of 307, the rest sits out


pytestmark = pytest.mark.usefixtures("local_ray")


def config(env: str, num_learners: int) -> GePPOConfig:
    """n = 768 new steps per iteration, whatever the number of learners, sampled in the driver
    (the subject is the learners; remote sampling gives the same episodes, tests/sampling)."""
    return (
        GePPOConfig()
        .environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
        .learners(num_learners=num_learners)
        .debugging(seed=0)
        .training(
            train_batch_size_per_learner=STEPS_PER_ITERATION // max(1, num_learners),
            num_epochs=EPOCHS,
            num_minibatches=MINIBATCHES,
            overlap_sampling=False,
        )
    )


@pytest.fixture(scope="module", params=[("HalfCheetah-v5", 3), ("CartPole-v1", 2)], ids=str)
def trained(request):
    """A local learner that has trained 2 iterations (a store of 2 batches, 1,536 rows), and
    its state then."""
    env, num_learners = request.param
    algo = config(env, 0).build_algo()
    for _ in range(2):
        algo.train()
    yield algo, algo.get_state(components=[COMPONENT_LEARNER_GROUP, COMPONENT_GEPPO]), num_learners
    algo.stop()


@pytest.fixture
def one_learner(trained):
    """The trained local learner, restored to its state after 2 iterations."""
    algo, state, _ = trained
    algo.set_state(state)
    return algo


@pytest.fixture
def num_learners(trained) -> int:
    return trained[2]


def local_weights(algo) -> list[torch.Tensor]:
    return [p.detach().clone() for p in algo.learner_group._learner.module[DEFAULT_MODULE_ID].parameters()]


def remote_weights(algo) -> list[list[torch.Tensor]]:
    return [
        call.get()
        for call in algo.learner_group.foreach_learner(
            lambda learner: [
                p.detach().clone() for p in learner.module[DEFAULT_MODULE_ID].unwrapped().parameters()
            ]
        )
    ]


def metric(result: dict, key: str) -> float:
    """A learner's reduced metric (a local learner's results hold RLlib's Stats objects)."""
    value = result[DEFAULT_MODULE_ID][key]
    return float(value.peek() if hasattr(value, "peek") else value)


def steps_and_rows(result: dict) -> tuple[int, int]:
    return int(metric(result, "num_gradient_steps")), int(metric(result, NUM_MODULE_STEPS_TRAINED))


def test_learners_take_one_learners_steps_and_then_train(one_learner, num_learners):
    """3 eager learners on HalfCheetah's long episodes (2 joined episodes in the store), 2
    compiled learners on CartPole's episodes of every length (the compiled part ends before
    the clip: the learners average their gradients in between), against one eager learner."""
    env = one_learner.config.env
    stored = one_learner.module_state().store.update_layout()
    rows = int(stored[C.LOSS_MASK].sum())
    segments = int((~stored[C.LOSS_MASK]).sum())
    assert 2 * STEPS_PER_ITERATION <= rows <= 2 * STEPS_PER_ITERATION + 2  # an env may step once more
    if env == "HalfCheetah-v5":
        assert segments == 2 < 3  # one joined episode per env: fewer than 3 learners

    compile_learner = env == "CartPole-v1"
    algo = config(env, num_learners).training(compile_learner=compile_learner).build_algo()
    try:
        algo.set_state(one_learner.get_state(components=[COMPONENT_LEARNER_GROUP, COMPONENT_GEPPO]))
        before = remote_weights(algo)
        for weights in before:
            for mine, reference in zip(weights, local_weights(one_learner), strict=True):
                torch.testing.assert_close(mine, reference, rtol=0, atol=0)

        inputs = one_learner.stores.update_inputs(DEFAULT_MODULE_ID)
        assert algo.stores.update_inputs(DEFAULT_MODULE_ID).shuffle_seed == inputs.shuffle_seed
        [reference] = one_learner.update_learner_group({DEFAULT_MODULE_ID: inputs})
        results = algo.update_learner_group({DEFAULT_MODULE_ID: inputs})
        compiled = [
            call.get()
            for call in algo.learner_group.foreach_learner(
                lambda learner: learner.gradient_step(DEFAULT_MODULE_ID).compiled
            )
        ]
        assert compiled == [compile_learner] * num_learners

        # Every learner: one learner's step count, on its slice of every global minibatch.
        steps, size = minibatch_shape(rows, MINIBATCHES, num_learners)
        assert (steps, size) == (MINIBATCHES, rows // MINIBATCHES) == (5, 307)
        assert steps_and_rows(reference) == (EPOCHS * steps, EPOCHS * steps * size)
        slices = [learner_slice(size, rank, num_learners) for rank in range(num_learners)]
        assert sorted(steps_and_rows(r) for r in results) == sorted(
            (EPOCHS * steps, EPOCHS * steps * (s.stop - s.start)) for s in slices
        )
        assert max(s.stop - s.start for s in slices) - min(s.stop - s.start for s in slices) <= 1

        # The same weights as one learner, on every learner, and the same TV.
        expected = local_weights(one_learner)
        for weights in remote_weights(algo):
            for mine, reference_weights in zip(weights, expected, strict=True):
                torch.testing.assert_close(mine, reference_weights, rtol=1e-4, atol=2e-5)
        for result in results:
            assert metric(result, "tv") == pytest.approx(metric(reference, "tv"), rel=1e-3)

        # And they train on their own: a whole iteration, finite metrics, identical learners.
        learner = algo.train()["learners"][DEFAULT_MODULE_ID]
        assert all(math.isfinite(learner[k]) for k in METRICS)
        first, *others = remote_weights(algo)
        for weights in others:
            for a, b in zip(first, weights, strict=True):
                assert torch.equal(a, b)

        # Fewer stored samples than learners (an agent that rarely acts): no learner takes a
        # step, the losses report zero, not NaN, and the weights stay.
        store = algo.module_state().store
        segment = store.batches[-1].segments[0]
        one_step = dataclasses.replace(
            segment,
            obs=segment.obs[:2],
            actions=segment.actions[:1],
            rewards=segment.rewards[:1],
            behaviour_logp=segment.behaviour_logp[:1],
            versions=segment.versions[:1],
            terminated=False,
            truncated=False,
        )
        store.set_state({"capacity": store.capacity, "batches": [[one_step]]})
        results = algo.update_learner_group({DEFAULT_MODULE_ID: algo.stores.update_inputs(DEFAULT_MODULE_ID)})
        assert [steps_and_rows(r) for r in results] == [(0, 0)] * num_learners
        assert all(metric(r, key) == 0.0 for r in results for key in ("policy_loss", "vf_loss"))
        for weights in remote_weights(algo):
            for mine, before in zip(weights, first, strict=True):
                assert torch.equal(mine, before)
    finally:
        algo.stop()


def test_the_shuffle_seed_follows_the_trial_seed_and_the_version(one_learner):
    seed = one_learner.stores.shuffle_seed()
    assert seed == one_learner.stores.update_inputs(DEFAULT_MODULE_ID).shuffle_seed
    one_learner.stores.policy_version += 1
    try:
        assert one_learner.stores.shuffle_seed() != seed
    finally:
        one_learner.stores.policy_version -= 1
    assert one_learner.stores.shuffle_seed() == seed
    assert isinstance(seed, int) and np.iinfo(np.uint32).min <= seed <= np.iinfo(np.uint32).max


@pytest.mark.parametrize(
    "runners,envs,n,per_env",
    [(0, 2, 1024, 512), (1, 2, 1024, 512), (4, 2, 4096, 512), (16, 2, 16384, 512), (2, 1, 2048, 1024)],
)
def test_the_scale_rule_grows_n_with_the_samplers_and_keeps_each_envs_share(runners, envs, n, per_env):
    scaled = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .training(train_batch_size_per_env_runner=1024)
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs)
    )
    scaled.validate()
    assert scaled.total_train_batch_size == scaled.samples_per_iteration == n
    assert scaled.get_rollout_fragment_length(worker_index=1) == per_env
    # Without it n stays fixed and every env's share shrinks.
    fixed = scaled.copy().training(train_batch_size_per_env_runner=None)
    assert fixed.total_train_batch_size == 1024
    assert fixed.get_rollout_fragment_length(worker_index=1) == 1024 // (max(1, runners) * envs)


def test_three_env_runners_each_collect_their_share_under_the_scale_rule():
    algo = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=3, num_envs_per_env_runner=1)
        .training(train_batch_size_per_env_runner=128, num_epochs=1, num_minibatches=4)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        result = algo.train()
        assert result["num_env_steps_sampled_lifetime"] == 3 * 128
        [batch] = algo.module_state().store.batches
        assert batch.num_steps == 384 and max(map(len, batch.segments)) <= 128
        assert result["learners"][DEFAULT_MODULE_ID]["num_gradient_steps"] == 4
    finally:
        algo.stop()


def test_an_unseeded_runs_shuffle_seed_and_restart_counts_survive_its_state():
    """A restored run draws the shuffles the original would have drawn and reseeds restarted
    EnvRunners past the seeds already used, also when no seed was set."""

    def unseeded():
        return config("CartPole-v1", 0).debugging(seed=None).build_algo()

    original, restored = unseeded(), unseeded()
    try:
        original._env_runner_restarts = {(False, 1): 2}
        assert (
            restored.stores.shuffle_seed() != original.stores.shuffle_seed()
        )  # two draws of the OS's entropy
        restored.set_state(original.get_state(components=[COMPONENT_GEPPO]))
        assert restored.stores.shuffle_seed() == original.stores.shuffle_seed()
        assert restored._env_runner_restarts == {(False, 1): 2}
    finally:
        original.stop()
        restored.stop()


@pytest.mark.parametrize(
    "space,multi_agent,flatten",
    [
        ("box", False, []),
        ("dict", False, None),
        ("agents", True, ["b"]),  # agent a's Box stays, agent b's Dict is flattened
    ],
)
def test_only_agents_without_box_observations_are_flattened(space, multi_agent, flatten):
    import gymnasium as gym

    from rllib_geppo.sampling.pipelines import _agents_to_flatten

    box, dict_ = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,))})
    spaces = {"box": box, "dict": dict_, "agents": gym.spaces.Dict({"a": box, "b": dict_})}
    assert _agents_to_flatten(spaces[space], multi_agent) == flatten
