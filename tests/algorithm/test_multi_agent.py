"""Multi-agent GePPO on RLlib's new API stack: every trained module has its own store, weights,
statistics and lr; agents mapped to one module pool their samples; policies_to_train is
honoured; turn-based agents' episodes are their own steps; checkpoints hold every module; and
two independent CartPole policies learn."""

import math
import sys

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole
from ray.rllib.examples.envs.classes.multi_agent.tic_tac_toe import TicTacToe

from rllib_geppo import GePPO, GePPOConfig
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.learner.learner import OPTIMIZER

from helpers import TUNED_EXAMPLES

MAX_SAMPLE_LAG = GePPOConfig().max_sample_lag

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # EnvRunners call its mappings


pytestmark = pytest.mark.usefixtures("local_ray")


def cartpoles(policies: set[str], mapping, **training) -> GePPOConfig:
    """Two CartPoles, one per agent, sampled in the driver (no EnvRunner process to start);
    small iterations."""
    return (
        GePPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies=policies, policy_mapping_fn=mapping)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .training(**{"train_batch_size_per_learner": 256, "num_epochs": 2, "num_minibatches": 4, **training})
    )


def one_per_agent(agent_id, episode, **kwargs):
    return f"p{agent_id}"


def shared(agent_id, episode, **kwargs):
    return "shared"


class RareAgentEnv(MultiAgentEnv):
    """Agent "often" acts at every step, agent "rare" at every 100th (its move hangs 100 steps
    until its next observation); episodes of 300 steps. Each is rewarded for action 1."""

    def __init__(self, config=None):
        super().__init__()
        self.agents = self.possible_agents = ["often", "rare"]
        self.observation_spaces = {a: gym.spaces.Box(-1.0, 1.0, (2,), np.float32) for a in self.agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.agents}
        self.t = 0

    def _obs(self, agents):
        return {a: np.array([self.t / 300, a == "rare"], np.float32) for a in agents}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(self.agents), {}

    def step(self, action_dict):
        self.t += 1
        rewards = {a: float(action) for a, action in action_dict.items()}
        done = self.t >= 300
        acting = self.agents if done or self.t % 100 == 0 else ["often"]
        return self._obs(acting), rewards, {"__all__": done}, {"__all__": False}, {}


class BurstyAgentEnv(MultiAgentEnv):
    """Agent "often" acts at every step, agent "bursty" only in steps 0-39 and 150-199 of each
    200-step episode, so that its batches of 64 env steps hold anything from 0 to 64 moves."""

    def __init__(self, config=None):
        super().__init__()
        self.agents = self.possible_agents = ["often", "bursty"]
        self.observation_spaces = {a: gym.spaces.Box(-1.0, 1.0, (2,), np.float32) for a in self.agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.agents}
        self.t = 0

    def _acting(self) -> list[str]:
        bursty = self.t < 40 or self.t >= 150
        return self.agents if bursty or self.t >= 200 else ["often"]

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {a: np.array([0.0, a == "bursty"], np.float32) for a in self._acting()}, {}

    def step(self, action_dict):
        self.t += 1
        rewards = {a: float(action) for a, action in action_dict.items()}
        obs = {a: np.array([self.t / 200, a == "bursty"], np.float32) for a in self._acting()}
        return obs, rewards, {"__all__": self.t >= 200}, {"__all__": False}, {}


class NoneReward(MultiAgentCartPole):
    """Two CartPoles; agent 1's reward is None from env step 5 on."""

    def __init__(self, config=None):
        super().__init__({"num_agents": 2})
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return super().reset(seed=seed, options=options)

    def step(self, action_dict):
        obs, rewards, terminated, truncated, infos = super().step(action_dict)
        self.t += 1
        if self.t >= 5 and 1 in rewards:
            rewards[1] = None
        return obs, rewards, terminated, truncated, infos


def stored_weights(algo: GePPO, module_id: str) -> np.ndarray:
    """The per-sample weight of every stored sample of a module, as the next update weighs it."""
    state = algo.module_state(module_id)
    weights = algo.stores.update_inputs(module_id).weights_by_version
    layout = state.store.update_layout()
    return np.array([weights.get(int(v), 0.0) for v in layout[C.VERSION][layout[C.LOSS_MASK]]])


def assert_each_age_weighs_nu(algo: GePPO, module_id: str) -> dict[int, int]:
    """Every stored sample of a module weighs nu at its age, one scale for the whole store,
    however many samples its version holds; the weights average 1 and their effective sample
    size is at most the samples stored. Returns the module's samples per version."""
    state = algo.module_state(module_id)
    steps = state.store.steps_by_version()
    weights = algo.stores.update_inputs(module_id).weights_by_version
    nu = algo.stores.lagged_nu(module_id)
    scales = [weight / nu[state.version - version] for version, weight in weights.items()]
    assert max(scales) == pytest.approx(min(scales), rel=1e-9), (steps, weights)
    assert stored_weights(algo, module_id).mean() == pytest.approx(1.0)
    assert state.store.effective_sample_size(nu, state.version) <= state.store.num_steps * (1 + 1e-12)
    return steps


def episode_ids(algo: GePPO, module_id: str) -> set[str]:
    return {s.episode_id for batch in algo.module_state(module_id).store.batches for s in batch.segments}


def test_each_module_keeps_its_own_store_weights_statistics_and_lr(tmp_path):
    algo = cartpoles({"p0", "p1"}, one_per_agent).build_algo()
    try:
        for _ in range(3):
            result = algo.train()
        assert sorted(algo.stores.states) == ["p0", "p1"]
        p0, p1 = algo.module_state("p0"), algo.module_state("p1")
        assert p0.store is not p1.store and len(p0.store.batches) == len(p1.store.batches) == 3
        # Each store holds its own agent's steps: no episode chunk in both.
        assert not episode_ids(algo, "p0") & episode_ids(algo, "p1")
        assert p0.obs_stats.count == p0.store.num_steps and p1.obs_stats.count == p1.store.num_steps
        assert p0.reward_scale != p1.reward_scale
        # Per-module metrics in RLlib's result layout.
        for module_id in ("p0", "p1"):
            learner = result["learners"][module_id]
            # Synchronous sampling (the driver's default): each of the 3 stored batches has a
            # behaviour policy of its own.
            assert math.isfinite(learner["tv"]) and learner["num_policies"] == 3
            assert learner["policy_lr"] == pytest.approx(
                algo.module_state(module_id).policy_lr / 1.03, rel=0.04
            )

        # The lr rule runs per module: an lr set on one reaches only its optimizer.
        p0.policy_lr = 1e-5
        algo.train()
        lrs = {
            m: algo.learner_group._learner.get_optimizer(m, OPTIMIZER).param_groups[0]["lr"]
            for m in ("p0", "p1")
        }
        assert lrs["p0"] == pytest.approx(1e-5) and lrs["p1"] > 1e-4

        # Checkpoints hold every module's state.
        algo.save_to_path(tmp_path)
        restored = GePPO.from_checkpoint(tmp_path)
        try:
            for module_id in ("p0", "p1"):
                mine, theirs = algo.module_state(module_id), restored.module_state(module_id)
                assert [b.version for b in theirs.store.batches] == [b.version for b in mine.store.batches]
                assert theirs.policy_lr == mine.policy_lr
                np.testing.assert_array_equal(theirs.obs_stats.mean, mine.obs_stats.mean)
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_agents_mapped_to_one_module_pool_their_samples():
    algo = cartpoles({"shared"}, shared).build_algo()
    try:
        algo.train()
        [batch] = algo.module_state("shared").store.batches
        layout = batch.layout
        # Both agents' chunks, each a segment of its own, every step of both.
        assert len({s.episode_id for s in batch.segments}) >= 2
        assert batch.num_steps == int(layout[C.LOSS_MASK].sum()) > 256
        result = algo.train()
        assert math.isfinite(result["learners"]["shared"]["tv"])
    finally:
        algo.stop()


def test_only_the_policies_to_train_learn():
    algo = cartpoles({"p0", "p1"}, one_per_agent).multi_agent(policies_to_train=["p0"]).build_algo()
    try:
        learner = algo.learner_group._learner
        before = {m: [p.detach().clone() for p in learner.module[m].parameters()] for m in ("p0", "p1")}
        for _ in range(2):
            result = algo.train()
        assert list(algo.stores.states) == ["p0"] and "tv" not in result["learners"].get("p1", {})
        after = {m: list(learner.module[m].parameters()) for m in ("p0", "p1")}
        assert all(torch.equal(a, b) for a, b in zip(before["p1"], after["p1"]))
        assert not all(torch.equal(a, b) for a, b in zip(before["p0"], after["p0"]))
    finally:
        algo.stop()


def test_turn_based_agents_store_only_their_own_moves():
    algo = (
        GePPOConfig()
        .environment(TicTacToe)
        .multi_agent(policies={"player1", "player2"}, policy_mapping_fn=lambda aid, ep, **kw: aid)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=128, num_epochs=1, num_minibatches=2)
        .build_algo()
    )
    try:
        for _ in range(2):
            result = algo.train()
        # One player moves per env step: the two stores together hold each of the 128 steps
        # of an iteration once (a move whose reply is still to come goes with the next chunk).
        steps = [[b.num_steps for b in algo.module_state(p).store.batches] for p in ("player1", "player2")]
        assert all(abs(a + b - 128) <= 1 for a, b in zip(*steps)), steps
        assert all(0 < n < 128 for n in steps[0] + steps[1])
        for player in ("player1", "player2"):
            assert math.isfinite(result["learners"][player]["tv"])
            # A move carried into the next batch keeps its version: a version spans two
            # batches, and its samples count once each in the weights, which average 1.
            assert_each_age_weighs_nu(algo, player)
    finally:
        algo.stop()


def test_an_agent_that_acts_rarely_trains_and_its_samples_age_with_its_own_updates():
    algo = (
        GePPOConfig()
        .environment(RareAgentEnv)
        .multi_agent(policies={"often", "rare"}, policy_mapping_fn=lambda aid, ep, **kw: aid)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=64, num_epochs=1, num_minibatches=1)
        .build_algo()
    )
    try:
        rare = algo.module_state("rare")
        waited = 0
        for _ in range(14):  # batches of the rare agent's carried-over move alone come up
            before = (
                rare.version,
                list(map(id, rare.store.batches)),
                rare.store.batches and algo.stores.sample_lag("rare"),
            )
            algo.train()
            if not rare.store.batches:  # its first move still hangs
                continue
            # Stored under the module's own versions: none newer than its policy.
            assert max(b.version for b in rare.store.batches) <= rare.version
            assert stored_weights(algo, "rare").mean() == pytest.approx(1.0)
            if (rare.version, list(map(id, rare.store.batches))) == before[:2]:
                # No new sample and no update: its samples did not age (global ages would have).
                assert algo.stores.sample_lag("rare") == before[2] == MAX_SAMPLE_LAG + 1
                waited += 1
        assert waited
        assert algo.module_state("often").version == algo.policy_version
        assert 0 < rare.version < algo.policy_version  # it skipped the updates it had nothing for
    finally:
        algo.stop()


def test_a_version_with_few_samples_takes_a_share_in_proportion_to_them():
    """The bursty agent's versions hold from a few samples to tens: each sample weighs nu at its
    age, so a version of 3 samples takes about 3 samples' share of the objective (per-sample
    weights of nu x N / n_v gave such a version up to 30% of it)."""
    algo = (
        GePPOConfig()
        .environment(BurstyAgentEnv)
        .multi_agent(policies={"often", "bursty"}, policy_mapping_fn=lambda aid, ep, **kw: aid)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=64, num_epochs=1, num_minibatches=1)
        .build_algo()
    )
    try:
        counts, updates = set(), 0
        for _ in range(7):
            result = algo.train()
            if algo.module_state("bursty").store.batches:
                steps = assert_each_age_weighs_nu(algo, "bursty")
                counts.update(steps.values())
                ess = result["learners"]["bursty"]["effective_sample_size"]
                if math.isfinite(ess):  # the module updated this iteration
                    assert 0 < ess <= algo.module_state("bursty").store.num_steps
                    updates += 1
        assert updates >= 4
        assert min(counts) < 16 < 32 < max(counts)  # versions of very different sizes came up
    finally:
        algo.stop()


@pytest.mark.parametrize("num_env_runners", [0, 1])
def test_a_mapping_to_an_unknown_policy_is_named_at_build(num_env_runners):
    config = cartpoles({"p0", "p1"}, lambda agent_id, episode, **kwargs: f"p{agent_id + 1}")
    with pytest.raises(
        ValueError,
        match=r"policy_mapping_fn maps agent 1 to policy 'p2', which is "
        r"not among the policies \['p0', 'p1'\]\. Fix: return one of those",
    ) as failure:
        config.env_runners(num_env_runners=num_env_runners).build_algo()
    assert not [entry for entry in failure.traceback if "env_runner" in str(entry.path)]


def test_a_none_reward_is_named_not_stored_as_zero():
    from rllib_geppo.sampling.env_checks import diagnose_env

    assert diagnose_env(NoneReward, {}) == "step(): the reward of agent 1 is None, not a number (at step 5)"
    algo = (
        cartpoles({"p0", "p1"}, one_per_agent)
        .environment(NoneReward)
        .env_runners(num_env_runners=0)
        .build_algo()
    )
    try:
        with pytest.raises(
            ValueError,
            match=r"NoneReward'>: the reward of agent 1 is None, not a "
            r"number \(RLlib would store 0\.0 in its place\)\. Fix the environment",
        ):
            algo.train()
        assert not algo.module_state("p1").store.batches
    finally:
        algo.stop()


def test_two_independent_cartpole_policies_learn():
    """The default overlapped loop, in the driver (as in test_learning.py): the best of the last
    three of 9 iterations was 300 and 250 for seeds 0 and 1, the first 41 and 45."""
    algo = cartpoles(
        {"p0", "p1"},
        one_per_agent,
        train_batch_size_per_learner=512,
        num_epochs=10,
        num_minibatches=32,
        compile_learner=False,  # eager, as in test_learning.py
        overlap_sampling=True,
    ).build_algo()
    try:
        returns = [algo.train()["env_runners"]["episode_return_mean"] for _ in range(9)]
    finally:
        algo.stop()
    # Two agents' returns summed: about 44 for random policies.
    assert returns[0] < 80
    assert np.nanmax(returns[-3:]) > 160, returns


def test_the_multi_agent_tuned_example_builds_valid_configs():
    import importlib.util

    path = TUNED_EXAMPLES / "geppo_multi_agent.py"
    spec = importlib.util.spec_from_file_location("geppo_multi_agent", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    for shared, policies in ((False, {"p0", "p1"}), (True, {"shared"})):
        config = example.config(shared).debugging(seed=0)
        config.validate()
        assert set(config.policies) == policies
        assert {config.policy_mapping_fn(agent, None) for agent in (0, 1)} == policies
