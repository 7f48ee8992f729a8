"""A config that says no: PPO settings GePPO does not use are rejected before Ray starts,
``entropy_coeff`` works, and the lean EnvRunner pipelines give way to RLlib's under an untested Ray."""

import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.connectors.env_to_module import EnvToModulePipeline, MeanStdFilter
from ray.rllib.connectors.module_to_env import ModuleToEnvPipeline
from ray.rllib.core import (
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
    DEFAULT_MODULE_ID,
)
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from rllib_geppo import GePPOConfig
from rllib_geppo.algorithm import settings as config_module
from rllib_geppo.algorithm.settings import GEPPO_SETTINGS, UNUSED_SETTINGS
from rllib_geppo.sampling import pipelines as env_runner_pipelines

from helpers import DOCS

RLLIB_GEPPO = Path(sys.executable).with_name("rllib-geppo")  # the console script


def pendulum(**training) -> GePPOConfig:
    return GePPOConfig().environment("Pendulum-v1").training(**training)


def old_stack(config: GePPOConfig) -> GePPOConfig:
    return config.api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)


# -- Settings GePPO does not use ---------------------------------------------------------------


@pytest.mark.parametrize(
    "setting,value,instead",
    [
        ("use_kl_loss", True, "no KL penalty"),
        ("use_critic", False, "always learns a value function"),
        ("use_gae", False, "always V-trace GAE"),
        ("entropy_coeff_schedule", [[0, 0.01], [1000, 0.0]], "write the schedule as `entropy_coeff`"),
        ("lr_schedule", [[0, 1e-3], [1000, 1e-4]], "write the schedule as `lr` (with `adaptive_lr=False`)"),
        ("optimizer", {"type": "SGD"}, "`lr`, `vf_lr` and `adam_eps`"),
    ],
)
@pytest.mark.parametrize("new_stack", [True, False])
def test_unused_ppo_settings_are_rejected_with_what_to_use_instead(setting, value, instead, new_stack):
    config = pendulum(**{setting: value})
    config = config if new_stack else old_stack(config)
    with pytest.raises(ValueError, match=rf"`{setting}=.*`: GePPO does not use `{setting}`") as err:
        config.validate()
    assert instead in str(err.value)


def test_a_learner_connector_is_rejected():
    config = pendulum().learners(learner_connector=lambda obs_space, act_space: [])
    with pytest.raises(ValueError, match="GePPO does not use `learner_connector`.*env_to_module"):
        config.validate()


def test_defaults_and_settings_left_at_them_validate():
    """Every setting in UNUSED_SETTINGS is covered above or here; set to GePPO's default (as a
    YAML file that repeats the defaults does) it passes on both stacks, as does the PPO baseline."""
    defaults = {name.lstrip("_"): default for name, (default, _) in UNUSED_SETTINGS.items()}
    assert set(defaults) >= {"use_kl_loss", "use_critic", "use_gae", "lr_schedule"}
    config = GePPOConfig().environment("Pendulum-v1")
    config.update_from_dict({k: v for k, v in defaults.items() if k != "learner_connector"})
    config.validate()
    old_stack(config).validate()
    pendulum(sample_reuse=False, adaptive_lr=False, entropy_coeff=0.01).validate()
    assert pendulum().entropy_coeff == 0.0 and pendulum().vf_clip_param == math.inf


def test_evaluation_by_episodes_on_several_envs_warns_once(caplog):
    def evaluated(num_envs: int, **overrides) -> GePPOConfig:
        return (
            pendulum()
            .env_runners(num_envs_per_env_runner=num_envs)
            .evaluation(
                evaluation_interval=1,
                evaluation_duration_unit="episodes",
                evaluation_config=overrides or None,
            )
        )

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == config_module.__name__]

    config_module._warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger=config_module.__name__):
        evaluated(1).validate()
        evaluated(4, num_envs_per_env_runner=1).validate()
        assert not warnings()
        evaluated(4).validate()
        evaluated(4).validate()
    assert [w[:64] for w in warnings()] == [
        "Evaluation by episodes on 4 envs per EnvRunner keeps the episode"
    ]
    assert "evaluation_config={'num_envs_per_env_runner': 1}" in warnings()[0]


def test_defaults_sample_on_two_envs_and_evaluate_on_one():
    config = pendulum()
    assert (config.num_env_runners, config.num_envs_per_env_runner) == (1, 2)
    assert config.get_evaluation_config_object().num_envs_per_env_runner == 1
    # A user's evaluation overrides merge with the default, from Python and from a Tune dict.
    merged = pendulum().evaluation(evaluation_config={"explore": False})
    tuned = pendulum().update_from_dict({"evaluation_config": {"explore": False}})
    for config in (merged, tuned):
        evaluation = config.get_evaluation_config_object()
        assert (evaluation.num_envs_per_env_runner, evaluation.explore) == (1, False)
    assert (
        pendulum()
        .env_runners(num_envs_per_env_runner=8)
        .evaluation(evaluation_config={"num_envs_per_env_runner": 4})
        .get_evaluation_config_object()
        .num_envs_per_env_runner
        == 4
    )


@pytest.mark.parametrize("value", [-0.01, math.nan, [[0, 0.01], [1000, -0.1]], [[10, 0.01]], "0.01"])
def test_entropy_coeff_must_be_a_non_negative_number_or_schedule(value):
    with pytest.raises(ValueError, match="`entropy_coeff` must be a finite number >= 0, or a schedule"):
        pendulum(entropy_coeff=value).validate()


def test_an_lr_schedule_needs_the_lr_rule_off():
    schedule = [[0, 1e-3], [1024, 1e-4]]
    with pytest.raises(ValueError, match=r"^`lr` is a schedule, but `adaptive_lr=True`.*adaptive_lr=False"):
        pendulum(lr=schedule).validate()
    pendulum(lr=schedule, adaptive_lr=False).validate()


def test_rllib_train_file_exits_2_naming_every_refused_setting(tmp_path):
    """A YAML file copied from a PPO experiment: the CLI's own checks and GePPO's, all at once;
    PPO's settings that GePPO honours or that cannot matter pass."""
    yaml_file = tmp_path / "kl.yaml"
    yaml_file.write_text(
        "kl:\n  run: GePPO\n  env: Pendulum-v1\n  stop: {training_iteration: 1}\n"
        "  config:\n    kl_coeff: 0.2\n    vf_loss_coeff: 0.01\n    vf_clip_param: 10.0\n"
        "    use_kl_loss: true\n    model: {vf_share_layers: true}\n"
        "    model_config: {vf_share_layers: true, head_fcnet_hiddens: [32]}\n"
    )
    proc = subprocess.run(
        [str(RLLIB_GEPPO), "train", "file", str(yaml_file), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert f"{yaml_file}: experiment 'kl': 3 problems in the config; fix them all:" in proc.stderr
    for named in (
        "config key 'model': 'model' configures the old API stack's ModelV2",
        "`use_kl_loss=True`: GePPO does not use `use_kl_loss`",
        "model_config['head_fcnet_hiddens']=[32] would be ignored",
    ):
        assert named in proc.stderr
    assert "To suppress all validation errors" not in proc.stderr


def test_a_config_copied_from_ppo_runs_and_what_it_cannot_honour_is_named():
    """RLlib's tuned Pendulum PPO with a few more of PPO's settings validates as written; a
    model setting GePPO's module would ignore is named."""
    copied = dict(
        train_batch_size_per_learner=512,
        minibatch_size=1024,  # > n = 512, but within the store
        num_epochs=6,
        lr=3e-4,
        lambda_=0.1,
        vf_clip_param=10.0,
        vf_loss_coeff=0.01,
        kl_coeff=0.2,
    )
    pendulum(**copied).rl_module(
        model_config={"fcnet_activation": "relu", "vf_share_layers": True}
    ).validate()
    with pytest.raises(ValueError) as err:
        pendulum(**copied).rl_module(model_config={"head_fcnet_hiddens": [32]}).validate()
    assert str(err.value).startswith("model_config['head_fcnet_hiddens']=[32] would be ignored")


def test_minibatches_are_checked_against_the_store_not_the_new_samples():
    """RLlib's PPOConfig refuses a minibatch_size above n ("In PPO, the train batch will be
    split into ... chunks"); GePPO's minibatches come from the M x n store."""
    batches = len(pendulum().nu)
    pendulum(train_batch_size_per_learner=512, minibatch_size=batches * 512).validate()
    with pytest.raises(ValueError) as err:
        pendulum(train_batch_size_per_learner=512, minibatch_size=batches * 512 + 1).validate()
    assert str(err.value).startswith(
        "`minibatch_size` must be None or at most the samples each learner holds in the full "
        f"store ({batches * 512}: {batches} batches of 512 new samples), from which GePPO draws "
        f"its minibatches; got {batches * 512 + 1}."
    )
    assert "In PPO" not in str(err.value)


@pytest.mark.parametrize(
    "model_config, named",
    [
        (
            {"head_fcnet_hiddens": [32]},
            "model_config['head_fcnet_hiddens']=[32] would be ignored: the "
            "module has no head layers: put all hidden layers in fcnet_hiddens",
        ),
        (
            {"fcnet_hidden": [32]},
            "model_config['fcnet_hidden']=[32] would be ignored: it is not a "
            "setting of GePPO's module. GePPO's RLModule reads fcnet_hiddens, "
            "vf_fcnet_hiddens, fcnet_activation, conv_filters, conv_activation and RLlib's fcnet_ "
            "and conv_ initializers only. Fix: leave it out",
        ),
        (
            {"head_fcnet_kernel_initializer": "xavier_uniform_"},
            "model_config['head_fcnet_kernel_initializer']='xavier_uniform_' would be ignored: the "
            "module has no head layers, and RLlib's PPO does not read it either",
        ),
        (
            {"fcnet_activation": "swish"},
            "model_config['fcnet_activation']='swish' is not one of GePPO's "
            "module's activations (tanh, relu, elu, silu, linear)",
        ),
        (DefaultModelConfig(head_fcnet_hiddens=[32]), "model_config['head_fcnet_hiddens']=[32]"),
    ],
)
def test_model_settings_the_module_would_ignore_are_refused_by_name(model_config, named):
    with pytest.raises(ValueError) as err:
        pendulum().rl_module(model_config=model_config).validate()
    assert str(err.value).startswith(named)


def test_model_settings_that_describe_the_module_pass():
    """PPO's settings at the values that describe GePPO's module, an initializer it applies,
    None (nothing asked), and RLlib's DefaultModelConfig with fields left at their defaults."""
    pendulum().rl_module(
        model_config={
            "fcnet_hiddens": [32],
            "vf_share_layers": False,
            "head_fcnet_hiddens": [],
            "free_log_std": True,
            "fcnet_kernel_initializer": "xavier_uniform_",
            "fcnet_bias_initializer": None,
        }
    ).validate()
    pendulum().rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[32])).validate()


def test_each_module_spec_of_geppos_module_is_checked_and_a_users_module_reads_its_own():
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule

    def two_policies(specs: dict) -> GePPOConfig:
        return (
            pendulum()
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda a, *_: a)
            .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        )

    shared = {"head_fcnet_hiddens": [32]}
    with pytest.raises(ValueError, match=r"^module 'p0': model_config\['head_fcnet_hiddens'\]=\[32\]"):
        two_policies({"p0": RLModuleSpec(model_config=shared), "p1": RLModuleSpec()}).validate()
    two_policies(
        {"p0": RLModuleSpec(module_class=DefaultPPOTorchRLModule, model_config=shared), "p1": RLModuleSpec()}
    ).validate()


def test_algorithm_page_documents_every_setting():
    """docs/algorithm.md has a row for each of GePPO's own settings and each rejected one."""
    page = (DOCS / "algorithm.md").read_text()
    own = [setting.name for setting in GEPPO_SETTINGS]
    for setting in [*own, *(name.lstrip("_") for name in UNUSED_SETTINGS), "entropy_coeff"]:
        assert f"| `{setting}`" in page or f", `{setting}`" in page, setting


# -- entropy_coeff on RLlib's new API stack ----------------------------------------------------


def log_std_after_training(entropy_coeff: float) -> tuple[torch.Tensor, dict]:
    """Pendulum, two small iterations sampled in the driver, fixed seed: the policy's log-std
    parameter and the last learner metrics."""
    algo = (
        pendulum(
            train_batch_size_per_learner=256, num_epochs=2, num_minibatches=4, entropy_coeff=entropy_coeff
        )
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        for _ in range(2):
            result = algo.train()
        module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]
        return module.log_std.detach().clone(), result["learners"][DEFAULT_MODULE_ID]
    finally:
        algo.stop()


def test_entropy_coeff_widens_the_policy(local_ray):
    (plain, plain_stats), (bonus, bonus_stats) = map(log_std_after_training, (0.0, 1.0))
    # 16 Adam steps at lr ~3e-4 pushed by the bonus alone would add ~0.005 to the log-std.
    assert (bonus - plain).min().item() > 0.002
    assert bonus_stats["entropy"] > plain_stats["entropy"]
    # RLlib's schedule that holds the same value trains exactly as the constant does.
    held, _ = log_std_after_training([[0, 1.0], [10**6, 1.0]])
    assert torch.equal(held, bonus)


def test_schedules_set_each_update_from_the_env_steps_sampled(local_ray):
    """lr and entropy_coeff as RLlib's schedules, linear in env steps: each update takes
    their values at the env steps sampled so far, the lr (with the lr rule off) as reported."""
    algo = (
        pendulum(
            train_batch_size_per_learner=256,
            num_epochs=1,
            num_minibatches=2,
            adaptive_lr=False,
            lr=[[0, 1e-3], [1024, 1e-4]],
            entropy_coeff=[[0, 0.5], [512, 0.0]],
        )
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        results = [algo.train()["learners"][DEFAULT_MODULE_ID] for _ in range(5)]
        assert algo.stores.update_inputs(DEFAULT_MODULE_ID, 384).entropy_coeff == pytest.approx(0.125)
    finally:
        algo.stop()
    # Updates after 256, 512, ... env steps sampled.
    assert [r["policy_lr"] for r in results] == pytest.approx([7.75e-4, 5.5e-4, 3.25e-4, 1e-4, 1e-4])


# -- Where the lean sampling path steps aside: RLlib's own EnvRunner pipelines ---------------------


def test_where_the_lean_path_steps_aside_rllib_s_pipelines_sample(monkeypatch):
    monkeypatch.setattr(env_runner_pipelines, "LEAN_SAMPLING", False)
    runner = SingleAgentEnvRunner(config=pendulum().env_runners(num_env_runners=0).debugging(seed=0))
    try:
        components = dict(runner.get_checkpointable_components())
        assert type(components[COMPONENT_ENV_TO_MODULE_CONNECTOR]) is EnvToModulePipeline
        assert type(components[COMPONENT_MODULE_TO_ENV_CONNECTOR]) is ModuleToEnvPipeline
        episodes = runner.sample(num_timesteps=100, explore=True)
        assert sum(map(len, episodes)) == 100
        assert "env_to_module_connector" in runner.get_metrics()  # RLlib's timers are back
    finally:
        runner.stop()


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("lr", float("inf"), "`lr` must be a finite positive number"),
        ("vf_lr", float("nan"), "`vf_lr` must be a finite positive number"),
        ("lr", [0.1, 0.2], "`lr` must be a finite positive number"),
        ("lr", [[0, 0.1], [100, 0.0]], "`lr` must be a finite positive number"),
    ],
)
def test_non_finite_or_list_lr_fails_validation(setting, value, message):
    with pytest.raises(ValueError, match=message):
        GePPOConfig().environment("Pendulum-v1").training(**{setting: value}).validate()


def test_a_refusal_names_its_fix_without_rllib_s_advice_to_switch_validation_off(caplog):
    config = pendulum(use_kl_loss=True, batch_multiple=0)
    with pytest.raises(ValueError) as refused:
        config.validate()
    assert "GePPO cannot run with 2 settings of this config" in str(refused.value)
    assert "suppress all validation errors" not in str(refused.value)
    config.experimental(_validate_config=False)  # still RLlib's switch: refusals become warnings
    with caplog.at_level(logging.WARNING, logger="rllib_geppo.algorithm.geppo"):
        config.validate()
    assert "GePPO cannot run with 2 settings of this config" in caplog.text


def test_every_refusal_of_a_python_config_comes_in_one_message_at_validate():
    """A refused setting, a bad value and RLlib's MeanStdFilter with a user's module (a check
    of the environment and the modules) are named together, before anything runs."""
    config = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .training(use_kl_loss=True, grad_clip=-1.0)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=DefaultPPOTorchRLModule, catalog_class=PPOCatalog)
        )
        .env_runners(env_to_module_connector=lambda env, spaces, device: MeanStdFilter())
    )
    with pytest.raises(ValueError) as failure:
        config.validate()
    message = str(failure.value)
    assert message.startswith("GePPO cannot run with 3 settings of this config; fix them all:\n")
    for problem in (
        "`grad_clip` must be",
        "`use_kl_loss=True`",
        "MeanStdFilter runs here with your own RLModule",
    ):
        assert message.count(problem) == 1, problem
    assert "suppress all validation errors" not in message


def test_ppo_settings_that_cannot_matter_are_accepted_and_train_batch_size_sets_n():
    config = GePPOConfig().training(kl_coeff=0.3, kl_target=0.02, vf_loss_coeff=0.01, train_batch_size=128)
    assert config.refused_settings() == []
    assert config.total_train_batch_size == 128  # as RLlib derives it: train_batch_size / learners
    config.update_from_dict({"train_batch_size": 512, "num_learners": 2})
    assert (config.train_batch_size_per_learner, config.total_train_batch_size) == (256, 512)
    explicit = GePPOConfig().training(train_batch_size=128, train_batch_size_per_learner=64)
    assert explicit.total_train_batch_size == 64  # RLlib's rule: the per-learner size, where set


def test_shared_layers_are_kept_separate_with_one_warning(caplog):
    config_module._warn_once.cache_clear()
    config = GePPOConfig().environment("CartPole-v1").rl_module(model_config=DefaultModelConfig())
    with caplog.at_level(logging.WARNING, logger=config_module.__name__):
        config.validate()
        config.validate()
    [record] = [r for r in caplog.records if "vf_share_layers=True" in r.getMessage()]
    assert "GePPO's module keeps them separate" in record.getMessage()


def test_rllib_s_own_refusals_come_without_its_advice_to_switch_validation_off():
    config = pendulum().env_runners(rollout_fragment_length=200)  # 400 per sample cannot make n = 1024
    with pytest.raises(ValueError) as refused:
        config.validate()
    assert "Try setting `rollout_fragment_length` to 'auto' OR to a value of 512." in str(refused.value)
    assert "suppress all validation errors" not in str(refused.value)
