"""GePPO on RLlib's new API stack: its settings (:class:`GePPOConfig`) and its training loop
(:class:`GePPO`), in one module as RLlib keeps ``PPOConfig`` and ``PPO``.

**Settings.** Each setting's default (the paper's), rule and meaning sit together in
:mod:`rllib_geppo.algorithm.settings`; ``validate()`` refuses every bad one at once.

**The training loop.** Each ``training_step`` (iteration k, the learners holding pi_k):

1. sample n env steps with pi_k from the EnvRunners (local or anywhere in the cluster);
2. lay them out as trajectory segments and add them to each trained module's FIFO store of its
   last M batches, every sample tagged with the version of the policy that collected it
   (:class:`~rllib_geppo.core.module_stores.ModuleStores`, which also keeps the running
   observation and return statistics);
3. one ``LearnerGroup.update`` over every stored sample (V-trace advantages under pi_k, then
   ``num_epochs`` x minibatches of the generalized clipped objective): pi_k -> pi_{k+1};
4. adapt each module's policy lr from the TV estimate of its update;
5. sync pi_{k+1} (weights, version and observation statistics) to the EnvRunners, and wait.

With overlapped sampling (the default wherever there are EnvRunners to overlap with) steps 1 and
3 run at the same time: the EnvRunners collect the next batch with pi_k while the learners update
on the store, so the youngest stored batch is one iteration old at every update, which the
policy weights account for (docs/overlapped_sampling.md). Nothing is in flight between
iterations, so checkpoints hold every sample exactly once.

On RLlib's old API stack ``training_step`` hands over to :mod:`rllib_geppo.old_stack`, imported
only then, which drives the same :class:`ModuleStores`.
"""

from __future__ import annotations

import copy
import logging
import textwrap
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.ppo import PPO, PPOConfig
from ray.rllib.core import COMPONENT_LEARNER_GROUP, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.policy import Policy
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.from_config import NotProvided
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)
from ray.tune.registry import register_env

from rllib_geppo import private_ray
from rllib_geppo.algorithm.env_runners import ActingPolicies, FailedSamples, reseed_restarted, sync_weights
from rllib_geppo.algorithm.settings import (
    GEPPO_NAMES,
    GEPPO_SETTINGS,
    OLD_STACK_FILTER_LEFT_OUT,
    RLLIB_SETTINGS,
    UNUSED_SETTINGS,
    geppo_modules_only,
    leaves_out_old_stack_filter,
    normalizes_actions,
    refused_settings,
    training_annotations,
    training_docstring,
    training_signature,
    warn_on_biased_evaluation,
    warn_on_shared_layers,
    without_rllib_advice,
)
from rllib_geppo.core import sample_reuse, segments
from rllib_geppo.core.module_state import ModuleState
from rllib_geppo.core.module_stores import ModuleStores
from rllib_geppo.core.networks import DEFAULT_MODEL_CONFIG
from rllib_geppo.core.update_inputs import UPDATE_INPUTS, UpdateInputs
from rllib_geppo.learner.learner import STEP_PATH
from rllib_geppo.records import result_schema
from rllib_geppo.records.checkpoint_manifest import write_manifest
from rllib_geppo.rl_module.checks import check_module_spaces, module_problems, trained_modules
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule, normalizes_observations
from rllib_geppo.sampling.env_checks import is_class_path
from rllib_geppo.sampling.episode_segments import segments_by_module
from rllib_geppo.sampling.pipelines import flatten_observations, lean, without_mean_std_filter

logger = logging.getLogger(__name__)


class GePPOConfig(PPOConfig):
    """Configuration for :class:`rllib_geppo.GePPO`.

    Every algorithm default is the paper's (Queeney et al. 2021, Appendix table; each in the
    table of :mod:`rllib_geppo.algorithm.settings`): n = 1024, B = 2 (M = 4,
    nu = [0.4, 0.3, 0.2, 0.1]), eps_PPO = 0.2, 10 epochs x 32 minibatches, separate 64x64 tanh
    networks. Sampling runs on one EnvRunner with 2 envs, evaluation on one env per EnvRunner.
    PPO settings that GePPO does not use are refused by :meth:`validate` unless left at their
    defaults.

    .. code-block:: python

        from rllib_geppo import GePPOConfig
        algo = GePPOConfig().environment("Hopper-v5").build_algo()
        result = algo.train()
    """

    #: Whether the policy takes one natural-gradient step per update (GeTRPO, GeVMPO) instead of
    #: GePPO's clipped minibatch steps.
    natural_gradient = False

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GePPO)
        for setting in (*RLLIB_SETTINGS, *GEPPO_SETTINGS):
            setattr(self, setting.name, copy.deepcopy(setting.default))
        for name, (default, _) in UNUSED_SETTINGS.items():
            setattr(self, name, copy.deepcopy(default))
        # Evaluation by episodes on several envs keeps those that end first: evaluate on one.
        self.evaluation_config = {"num_envs_per_env_runner": 1}
        # None: validate() sets it (settings.normalizes_actions), True for a user's RLModule as
        # in PPO, False for GePPO's, whose distribution is over env units already (it normalises
        # inside, see rl_module): RLlib only clips its actions to the bounds.
        self.normalize_actions = None
        self.clip_actions = True
        self.rl_module(model_config=copy.deepcopy(DEFAULT_MODEL_CONFIG))

    @override(PPOConfig)
    def training(self, **kwargs) -> GePPOConfig:
        """Set training options: GePPO's own, below (:data:`~rllib_geppo.algorithm.settings.GEPPO_SETTINGS`),
        and RLlib's (``lr``, ``clip_param``, ``gamma``, ``lambda_``, ``num_epochs``, ``grad_clip``,
        ``train_batch_size_per_learner``, ``entropy_coeff``, ...), which pass through to
        :meth:`PPOConfig.training`.
        """
        own = {name: kwargs.pop(name) for name in list(kwargs) if name in GEPPO_NAMES}
        super().training(**kwargs)
        for name, value in own.items():
            if value is not NotProvided:
                setattr(self, name, value)
        self._derive_batch_from_total(kwargs)
        return self

    @override(PPOConfig)
    def update_from_dict(self, config_dict: dict) -> GePPOConfig:
        super().update_from_dict(config_dict)
        self._derive_batch_from_total(config_dict)
        return self

    def _derive_batch_from_total(self, given: dict) -> None:
        """A PPO config's ``train_batch_size`` alone sets n, as in RLlib: it clears GePPO's
        default ``train_batch_size_per_learner``, which RLlib then derives as
        ``train_batch_size`` / learners."""
        if given.get("train_batch_size", NotProvided) is not NotProvided and (
            given.get("train_batch_size_per_learner", NotProvided) is NotProvided
        ):
            self.train_batch_size_per_learner = None

    training.__doc__ += "\n" + textwrap.indent(training_docstring(), " " * 8)
    training.__signature__ = training_signature(PPOConfig.training)
    training.__annotations__.update(training_annotations())

    # -- What follows from the settings (one place for each) ---------------------------------

    @property
    def nu(self) -> np.ndarray:
        """nu, the weight of each batch age (``[1.0]`` without sample reuse)."""
        return sample_reuse.nu(
            self.sample_reuse,
            self.policy_weights,
            self.batch_multiple,
            self.max_policies,
            self.weights_tradeoff,
            self.weights_tradeoff_rule,
        )

    @property
    def uses_overlapped_sampling(self) -> bool:
        """Whether the EnvRunners sample while the learners update (``overlap_sampling``
        resolved: "auto" means sample reuse, at least one EnvRunner and the new API stack)."""
        return sample_reuse.uses_overlapped_sampling(
            self.overlap_sampling,
            self.sample_reuse,
            self.num_env_runners,
            self.enable_env_runner_and_connector_v2,
        )

    @property
    def max_sample_lag(self) -> int:
        """The oldest the youngest stored batch may be at an update, in updates
        (:func:`~rllib_geppo.core.sample_reuse.max_sample_lag`)."""
        return sample_reuse.max_sample_lag(self.sample_lag)

    @property
    def held_back_updates(self) -> int:
        """How many updates the EnvRunners' weights trail the newest beyond what sampling
        gives (:func:`~rllib_geppo.core.sample_reuse.held_back_updates`)."""
        return sample_reuse.held_back_updates(self.sample_lag, self.uses_overlapped_sampling)

    @property
    def clip_eps(self) -> float:
        """eps of the clipped objective without a sampling lag: eps_PPO / E_nu[i + 1] (Lemma 4)."""
        return self.clip_eps_at_lag(0)

    def clip_eps_at_lag(self, lag: int) -> float:
        """eps for an update whose youngest stored batch is ``lag`` iterations old
        (:func:`~rllib_geppo.core.sample_reuse.clip_eps_at_lag`)."""
        return sample_reuse.clip_eps_at_lag(self.clip_param, self.nu, lag, self.lag_clip_rule)

    @property
    @override(PPOConfig)
    def total_train_batch_size(self) -> int:
        """n, new env steps per iteration with sample reuse: ``train_batch_size_per_env_runner``
        x samplers where that is set, else RLlib's ``train_batch_size_per_learner`` x learners."""
        if self.train_batch_size_per_env_runner is None:
            return super().total_train_batch_size
        return self.train_batch_size_per_env_runner * max(1, self.num_env_runners)

    @property
    def samples_per_iteration(self) -> int:
        """New env steps per iteration: n with sample reuse, B*n for the PPO baseline."""
        return sample_reuse.samples_per_iteration(
            self.total_train_batch_size, self.sample_reuse, self.batch_multiple
        )

    # -- RLlib's hooks: GePPO's module, learner and connector pipelines ------------------------

    @property
    @override(PPOConfig)
    def model_config(self) -> dict:
        # The module's initial std is a training setting, passed as PPOConfig passes its
        # vf_share_layers: a value set in model_config itself wins.
        return {"init_std_multiple": self.init_std_multiple} | super().model_config

    @override(PPOConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=GePPOTorchRLModule)

    @override(PPOConfig)
    def get_default_learner_class(self):
        from rllib_geppo.learner.torch_learner import GePPOTorchLearner

        return GePPOTorchLearner

    @override(PPOConfig)
    def build_env_to_module_connector(self, env=None, spaces=None, device=None):
        pipeline = super().build_env_to_module_connector(env=env, spaces=spaces, device=device)
        if geppo_modules_only(self):  # they normalise observations themselves
            pipeline = without_mean_std_filter(pipeline)
        # RLlib's pieces, run without per-piece bookkeeping on every env step (see the module).
        return lean(flatten_observations(pipeline, multi_agent=self.is_multi_agent), device=device)

    @override(PPOConfig)
    def build_module_to_env_connector(self, env=None, spaces=None):
        pipeline = super().build_module_to_env_connector(env=env, spaces=spaces)
        return lean(pipeline, normalize_actions=self.normalize_actions, clip_actions=self.clip_actions)

    # -- Validation ---------------------------------------------------------------------------

    @override(PPOConfig)
    def validate(self) -> None:
        # GePPO's checks first, all reported at once (a config copied from PPO often holds
        # several settings GePPO refuses), the environment's spaces and the modules included:
        # RLlib's own trip over some bad values (an lr list that is no schedule) with messages
        # that name neither the setting nor a fix.
        problems = self.refused_settings() + self.module_problems()
        if problems:
            message = (
                problems[0]
                if len(problems) == 1
                else (
                    f"{self.algo_class.__name__} cannot run with {len(problems)} settings of this "
                    "config; fix them all:\n" + "\n".join(f"  - {problem}" for problem in problems)
                )
            )
            # Each message names its fix: RLlib's advice to switch validation off is left out,
            # though experimental(_validate_config=False) still turns the refusals into warnings.
            if private_ray.validates(self):
                raise ValueError(message)
            logger.warning(message)
        # PPOConfig.validate compares minibatch_size with the new samples per learner (and
        # explains it with PPO's split of the train batch); GePPO's minibatches come from the
        # whole store, which refused_settings checks, so RLlib's check runs without it (on the
        # old stack it compares with train_batch_size, which fails on None: 1 stands in).
        minibatch_size, self.minibatch_size = (
            self.minibatch_size,
            (None if self.enable_rl_module_and_learner else 1),
        )
        try:
            super().validate()
        except ValueError as err:  # RLlib's own refusal, which names its fix: without its advice
            raise ValueError(without_rllib_advice(str(err))) from None
        finally:
            self.minibatch_size = minibatch_size
        if self.normalize_actions is None:
            self.normalize_actions = normalizes_actions(self)
        warn_on_biased_evaluation(self)
        warn_on_shared_layers(self)
        if leaves_out_old_stack_filter(self):
            logger.info(OLD_STACK_FILTER_LEFT_OUT)
            self.observation_filter = "NoFilter"
        if self.env_runner_cls is None and self.enable_env_runner_and_connector_v2 and not self.output:
            from rllib_geppo.sampling.env_runner import GePPOEnvRunner, GePPOMultiAgentEnvRunner

            # RLlib's, with independent seeds, or with its rewards checked (the module doc).
            self.env_runner_cls = GePPOMultiAgentEnvRunner if self.is_multi_agent else GePPOEnvRunner

    def refused_settings(self) -> list[str]:
        """Every setting of this config that GePPO cannot run with, one message each, naming
        the setting and the fix (empty: none); :meth:`validate` raises them together
        (:func:`rllib_geppo.algorithm.settings.refused_settings`)."""
        return refused_settings(self)

    def module_problems(self) -> list[str]:
        """What the environment's spaces and the modules built for them refuse, checked here in
        the driver as each trial will check them before any worker starts: one message, or none
        (:func:`rllib_geppo.rl_module.checks.module_problems`)."""
        return [] if self.in_evaluation else module_problems(self)


#: Checkpoint component holding each trained module's store, adapted lr and running statistics.
COMPONENT_GEPPO = "geppo"


class GePPO(PPO):
    """Generalized Proximal Policy Optimization with Sample Reuse (Queeney et al., 2021).

    Every trained module (one, or one per policy of a multi-agent config) has its store,
    running statistics and adapted lr in :attr:`stores` (:meth:`module_state` gives one). All
    modules update together, once per iteration.
    """

    @classmethod
    @override(PPO)
    def get_default_config(cls) -> GePPOConfig:
        return GePPOConfig()

    @classmethod
    @override(PPO)
    def get_default_policy_class(cls, config) -> type[Policy]:
        from rllib_geppo.old_stack.torch_policy import GePPOTorchPolicy

        return GePPOTorchPolicy

    @override(PPO)
    def setup(self, config: GePPOConfig) -> None:
        observation_spaces = check_module_spaces(config, self.env_creator)
        if is_class_path(config.env):
            # RLlib's new-stack EnvRunners make Tune-registered names and gymnasium ids only:
            # register a class path ("my_pkg.envs.MyEnv") under itself, as RLlib resolved it.
            register_env(config.env, self.env_creator)
        super().setup(config)
        if not config.enable_env_runner_and_connector_v2:
            # Each RolloutWorker builds its own policy, with its own initial weights: pi_0 is
            # the driver's, so the first batch's behaviour policy must be too (pi_0 / mu = 1).
            self.env_runner_group.sync_weights(timeout_seconds=None)
        self.stores = ModuleStores(
            config,
            {
                module_id: normalizes_observations(observation_spaces[module_id])
                for module_id in trained_modules(config)
            },
            seed=config.seed,
        )
        self._sampler = ThreadPoolExecutor(1, "geppo-sampler") if config.uses_overlapped_sampling else None
        self._result_keys: list[result_schema.Path] | None = None  # set by the first result
        self._failed_samples = FailedSamples(config, self.env_creator)
        self._env_runner_restarts: dict[tuple[bool, int], int] = {}
        self._acting = ActingPolicies(self.learner_group, config.held_back_updates)

    def module_state(self, module_id: str = DEFAULT_MODULE_ID) -> ModuleState:
        """The store, running statistics and policy lr of a trained module (default: the
        single-agent module)."""
        return self.stores[module_id]

    @property
    def policy_version(self) -> int:
        """The version of pi_k: how many updates the learners took (``stores.policy_version``)."""
        return self.stores.policy_version

    @override(PPO)
    def training_step(self) -> None:
        if not self.config.enable_env_runner_and_connector_v2:
            from rllib_geppo.old_stack.training_step import training_step_old_api_stack

            return training_step_old_api_stack(self)
        ready = any(self.stores.may_update(m, iteration=self.iteration + 1, quiet=True) for m in self.stores)
        if self._sampler is not None and ready:
            # pi_k collects the next batch while the learners update on the stored ones.
            pending = self._sampler.submit(self._sample)
            self._update_learners()
            self._store_episodes(*pending.result())
        else:
            self._store_episodes(*self._sample())
            self._update_learners()
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self._sync_env_runner_weights()

    def _sample(self) -> tuple[list, list, float]:
        """n env steps from the EnvRunners: (episodes, EnvRunner metrics, seconds taken)."""
        start = time.perf_counter()
        episodes, runner_metrics = synchronous_parallel_sample(
            worker_set=self.env_runner_group,
            max_env_steps=self.config.samples_per_iteration,
            sample_timeout_s=self.config.sample_timeout_s,
            _uses_new_env_runners=True,
            _return_metrics=True,
        )
        return episodes, runner_metrics, time.perf_counter() - start

    def _store_episodes(self, episodes: list, runner_metrics: list, seconds: float) -> None:
        self._failed_samples.count(sum(map(len, episodes)), iteration=self.iteration + 1)
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        self.metrics.log_value((TIMERS, ENV_RUNNER_SAMPLING_TIMER), seconds)
        new_segments = segments_by_module(episodes, multi_agent=self.config.is_multi_agent)
        for module_id in self.stores:
            dropped = self.stores.add(
                module_id, new_segments.get(module_id, []), iteration=self.iteration + 1
            )
            self.metrics.log_value((LEARNER_RESULTS, module_id, "num_dropped_segments"), dropped, window=1)

    def _env_steps_sampled(self) -> int:
        """Env steps sampled over the run, where RLlib's schedules are read."""
        return self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)

    def _update_learners(self) -> None:
        """One update of every module that may update, then each one's lr rule."""
        iteration = self.iteration + 1
        inputs = {
            module_id: self.stores.update_inputs(module_id, self._env_steps_sampled())
            for module_id in self.stores
            if self.stores.may_update(module_id, iteration=iteration)
        }
        if not inputs:
            return
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            results = self.update_learner_group(inputs)
        # Each learner names its step; RLlib's metrics aggregate no text: the first learner's.
        for module_id, path in pop_step_paths(results).items():
            self.metrics.log_value((LEARNER_RESULTS, module_id, STEP_PATH), path, reduce="item")
        self.metrics.aggregate(results, key=LEARNER_RESULTS)
        for module_id, module_inputs in inputs.items():
            for key, value in self.stores.metrics(module_id, module_inputs).items():
                self.metrics.log_value((LEARNER_RESULTS, module_id, key), value, window=1)
            learner = self.metrics.peek((LEARNER_RESULTS, module_id))
            if not learner["num_gradient_steps"]:
                logger.info(
                    "iteration %d: module %r has fewer stored samples than learners; no "
                    "gradient step this iteration.",
                    iteration,
                    module_id,
                )
                continue
            self.stores.adapt_lr(
                module_id,
                learner["tv"],
                module_inputs.clip_eps,
                iteration=iteration,
                complete=learner["num_skipped_steps"] < learner["num_gradient_steps"],
            )
        self.stores.record_update(inputs)  # after the metrics, which describe the update as it ran

    def update_learner_group(self, inputs: dict[str, UpdateInputs]) -> list[dict[str, Any]]:
        """One update of every learner over the stores of the modules in ``inputs`` (module ->
        its :class:`UpdateInputs`); each learner's results.

        Every learner gets all stored samples, so that V-trace runs over whole episodes
        whatever their length, and trains on its slice of each global minibatch
        (:mod:`rllib_geppo.core.minibatches`); remote learners read one copy of the store from
        Ray's object store.
        """
        layouts = {module_id: self.stores.layout(module_id) for module_id in inputs}
        batch = MultiAgentBatch(
            {module_id: SampleBatch(layout) for module_id, layout in layouts.items()},
            env_steps=max(segments.num_steps(layout) for layout in layouts.values()),
        )
        if self.learner_group.is_local:
            data = {"batch": batch}
        else:
            data = {"batch_refs": [ray.put(batch)] * len(self.learner_group)}
        return self.learner_group.update(
            **data,
            timesteps={
                UPDATE_INPUTS: inputs,
                WEIGHTS_SEQ_NO: self.stores.next_version,
                NUM_ENV_STEPS_SAMPLED_LIFETIME: self._env_steps_sampled(),
            },
        )

    @override(Algorithm)
    def restore_env_runners(self, env_runner_group) -> list[int]:
        restored = super().restore_env_runners(env_runner_group)
        reseed_restarted(
            env_runner_group,
            restored,
            self._env_runner_restarts,
            evaluation=env_runner_group is self.eval_env_runner_group,
        )
        return restored

    def _sync_env_runner_weights(self, *, force: bool = False) -> None:
        """Give every EnvRunner the policy it acts with next (:class:`ActingPolicies`: pi_k, or
        with ``sample_lag`` an older one) and wait (:func:`sync_weights`). ``force=True``
        (after a restore) loads it whatever the EnvRunners' versions, on the evaluation
        EnvRunners too."""
        acting = self._acting.next(restart=force)
        groups = [self.env_runner_group]
        if force and self.eval_env_runner_group is not None:
            groups.append(self.eval_env_runner_group)
        timeout_s, iteration = self.config.sample_timeout_s, self.iteration + 1
        sync_weights(
            groups, acting, force=force, timeout_s=timeout_s, iteration=iteration, env=self.config.env
        )

    # -- Results, checkpoints and stopping ----------------------------------------------------

    @override(Algorithm)
    def log_result(self, result: dict[str, Any]) -> None:
        # The same keys in every result, also across a resume: Tune writes progress.csv's
        # columns from the first result (rllib_geppo.records.result_schema). In place: train()
        # returns it.
        late = self.stores if self.config.enable_env_runner_and_connector_v2 else ()
        self._result_keys = result_schema.conform(result, self._result_keys, late_modules=late)
        super().log_result(result)

    @override(Algorithm)
    def save_to_path(self, path=None, *args, **kwargs) -> str:
        path = super().save_to_path(path, *args, **kwargs)
        if kwargs.get("filesystem") is None and "://" not in str(path):
            write_manifest(path, training_iteration=self.iteration)
        return path

    @override(Algorithm)
    def save_checkpoint(self, checkpoint_dir: str) -> None:
        super().save_checkpoint(checkpoint_dir)  # the new stack's goes through save_to_path
        if not self.config.enable_rl_module_and_learner:
            write_manifest(checkpoint_dir, training_iteration=self.iteration)

    @override(Algorithm)
    def restore_from_path(self, path, *args, **kwargs) -> None:
        super().restore_from_path(path, *args, **kwargs)
        if self.config.enable_env_runner_and_connector_v2:
            self._sync_env_runner_weights(force=True)

    @override(Algorithm)
    def get_state(
        self,
        components: str | Collection[str] | None = None,
        *,
        not_components: str | Collection[str] | None = None,
        **kwargs,
    ) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if _selected(COMPONENT_GEPPO, components, not_components):
            state[COMPONENT_GEPPO] = self._geppo_state()
        return state

    @override(Algorithm)
    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._set_geppo_state(state)
        if COMPONENT_LEARNER_GROUP in state and self.config.enable_env_runner_and_connector_v2:
            self._sync_env_runner_weights(force=True)  # RLlib's sync skips older versions

    @override(Algorithm)
    def __getstate__(self) -> dict[str, Any]:
        # Old API stack: its checkpoints go through __getstate__/__setstate__, not get_state.
        state = super().__getstate__()
        state[COMPONENT_GEPPO] = self._geppo_state()
        return state

    @override(Algorithm)
    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._set_geppo_state(state)

    def _geppo_state(self) -> dict[str, Any]:
        """Each trained module's state, the policy version, the result schema and the
        EnvRunners' restart counts."""
        return {
            **self.stores.get_state(),
            "result_keys": self._result_keys,
            "env_runner_restarts": dict(self._env_runner_restarts),
        }

    def _set_geppo_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_GEPPO not in state:
            return
        geppo = state[COMPONENT_GEPPO]
        self.stores.set_state(geppo)
        self._env_runner_restarts = dict(geppo.get("env_runner_restarts", {}))
        if geppo.get("result_keys") is not None:
            self._result_keys = [tuple(path) for path in geppo["result_keys"]]

    @override(Algorithm)
    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.shutdown(wait=True)
        self._failed_samples.close()
        super().stop()


def _selected(
    component: str, components: str | Collection[str] | None, not_components: str | Collection[str] | None
) -> bool:
    """Whether ``get_state(components, not_components=...)`` asks for ``component``, read as
    RLlib's own ``get_state`` overrides read them: named (itself or one of its parts,
    ``"geppo/..."``) or nothing named, and not named in ``not_components``."""
    asked = [components] if isinstance(components, str) else list(components or ())
    excluded = [not_components] if isinstance(not_components, str) else list(not_components or ())
    named = component in asked or any(name.startswith(component + "/") for name in asked)
    return (components is None or named) and component not in excluded


def pop_step_paths(results: list[dict[str, Any]]) -> dict[str, str]:
    """Each module's ``step_path`` from the learners' results (the first learner's), taken out
    of all of them."""
    paths: dict[str, str] = {}
    for result in results:
        for module_id, metrics in result.items():
            if isinstance(metrics, dict) and STEP_PATH in metrics:
                item = metrics.pop(STEP_PATH)
                paths.setdefault(module_id, item.peek() if hasattr(item, "peek") else item)
    return paths
