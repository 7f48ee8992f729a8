"""GeTRPO and GeVMPO on GePPO's store: they train with finite metrics, their policy step stays
within its KL bound, sample_reuse=False gives TRPO and V-MPO, they are Tune's "GeTRPO" and
"GeVMPO", and their refusals; and GePPO's early_stop ends an update's epochs."""

import math

import numpy as np
import pytest
from ray import tune
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig, GeTRPOConfig, GeVMPOConfig
from rllib_geppo.core.natural_gradient import kl_bound

pytestmark = pytest.mark.usefixtures("local_ray")


def small(config_class, env: str = "Pendulum-v1", **training):
    return (
        config_class()
        .environment(env)
        .env_runners(num_env_runners=0)
        .training(**{"train_batch_size_per_learner": 256, "num_epochs": 2, "num_minibatches": 4, **training})
        .debugging(seed=0)
    )


def learner_results(config, iterations: int = 3) -> list[dict]:
    algo = config.build_algo()
    try:
        return [algo.train()["learners"][DEFAULT_MODULE_ID] for _ in range(iterations)]
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("config_class", "env"), [(GeTRPOConfig, "Hopper-v5"), (GeVMPOConfig, "Pendulum-v1")]
)
def test_they_train_within_their_kl_bound_with_finite_metrics(config_class, env):
    results = learner_results(small(config_class, env))
    delta = kl_bound(0.1)  # eps = 0.2 / E_nu[i + 1] = 0.1 with the paper's weights
    for result in results:
        for key in ("tv", "mean_kl", "vf_loss", "policy_loss", "entropy", "line_search_kl"):
            assert math.isfinite(result[key]), key
        assert result["clip_eps"] == pytest.approx(0.1)
        assert 0 < result["line_search_kl"] <= 1.5 * delta  # an accepted step, within the bound
        assert result["mean_kl"] == pytest.approx(result["line_search_kl"], rel=1e-4)
        assert result["step_path"] == "hand_eager"  # the critic's steps; "auto" compiles later
        assert result["num_gradient_steps"] == 2 * 4  # the critic's: epochs x minibatches
    assert [r["num_policies"] for r in results] == [1, 2, 3]
    if config_class is GeVMPOConfig:  # the targets sit at the dual's KL bound
        assert all(r["targets_kl"] == pytest.approx(delta, rel=1e-2) for r in results)
        assert all(0 < r["temperature"] < math.inf for r in results)


def test_without_sample_reuse_they_are_trpo_and_vmpo():
    config = small(GeTRPOConfig, sample_reuse=False)
    assert list(config.nu) == [1.0] and config.clip_eps == pytest.approx(0.2)
    assert config.samples_per_iteration == 2 * 256  # B x n, as PPO
    [result] = learner_results(config, iterations=1)
    assert 0 < result["line_search_kl"] <= 1.5 * kl_bound(0.2)  # delta = 0.02


@pytest.mark.parametrize("name", ["GeTRPO", "GeVMPO"])
def test_they_are_registered_with_tune(name):
    trainable = tune.registry.get_trainable_cls(name)
    assert trainable.get_default_config().natural_gradient
    assert type(trainable.get_default_config()).__name__ == f"{name}Config"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (GeTRPOConfig().training(adaptive_lr=True), "`adaptive_lr=True` adapts the lr of GePPO's policy"),
        (GeVMPOConfig().training(lr=1e-3), "`lr=0.001` sets GePPO's clipped minibatch steps of the policy"),
        (GeTRPOConfig().training(grad_clip_scope="all"), "`grad_clip_scope='all'` sets GePPO's clipped"),
        (GeVMPOConfig().learners(num_learners=2), "`num_learners=2`: GeVMPO runs on one learner"),
        (
            GeTRPOConfig().api_stack(
                enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False
            ),
            "GeTRPO runs on the new API stack only",
        ),
        (GePPOConfig().training(cg_iterations=10), "`cg_iterations=10` sets GeTRPO's and GeVMPO's"),
    ],
)
def test_what_they_cannot_run_with_is_refused_with_the_fix(config, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config.environment("Pendulum-v1").validate()


def test_several_refusals_come_at_once_under_the_algorithm_s_name():
    config = GeTRPOConfig().environment("Pendulum-v1").training(lr=1e-2, entropy_coeff=0.01)
    with pytest.raises(ValueError) as refused:
        config.validate()
    message = str(refused.value)
    assert message.startswith("GeTRPO cannot run with 2 settings of this config; fix them all:\n")
    assert "`lr=0.01` sets GePPO's clipped" in message and "`entropy_coeff=0.01` sets" in message


def test_early_stop_ends_geppo_s_epochs_once_the_tv_passes_its_target():
    """A large lr moves the policy far in one epoch: with early_stop the update ends after it
    (4 steps of 4 x 4), without it runs all 4 epochs."""
    training = {"lr": 0.05, "num_epochs": 4, "adaptive_lr": False}
    stopped = learner_results(small(GePPOConfig, early_stop=True, **training), iterations=1)[0]
    full = learner_results(small(GePPOConfig, **training), iterations=1)[0]
    assert full["num_gradient_steps"] == 16 and full["tv"] > full["tv_target"]
    assert stopped["num_gradient_steps"] in (4, 8, 12)
    assert np.isfinite(stopped["tv"])
