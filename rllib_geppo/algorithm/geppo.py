"""GePPO on RLlib's new API stack: its settings (:class:`GePPOConfig`) and its training loop
(:class:`GePPO`), in one module as RLlib keeps ``PPOConfig`` and ``PPO``.

**Settings.** Every default is the paper's (Appendix table); PPO settings GePPO does not use are
rejected by ``validate()`` unless left at their defaults (:data:`UNUSED_SETTINGS`).

**The training loop.** Each ``training_step`` (iteration k, the learners holding pi_k):

1. sample n env steps with pi_k from the EnvRunners (local or anywhere in the cluster);
2. lay them out as trajectory segments and append them to the FIFO store of the last M batches,
   each sample tagged with the version of the policy that collected it; fold them into the
   running observation and return statistics;
3. one ``LearnerGroup.update`` over every stored sample (V-trace advantages under pi_k, then
   ``num_epochs`` x minibatches of the generalized clipped objective): pi_k -> pi_{k+1};
4. adapt the policy lr from the TV estimate of the update (one decision for all learners);
5. sync pi_{k+1} (weights, version and observation statistics) to the EnvRunners, and wait.

With overlapped sampling (the default wherever there are EnvRunners to overlap with) steps 1 and
3 run at the same time: the EnvRunners collect the next batch with pi_k while the learners update
on the store, so the youngest stored batch is one iteration old at every update, which the
policy weights account for (docs/overlapped_sampling.md). Nothing is in flight between
iterations, so checkpoints hold every sample exactly once.

On RLlib's old API stack ``training_step`` hands over to :mod:`rllib_geppo.old_stack`, imported
only then.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Collection, Sequence

import gymnasium as gym
import numpy as np
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.ppo import PPO, PPOConfig
from ray.rllib.connectors.common.flatten_observations import FlattenObservations
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.policy import Policy
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.from_config import NotProvided
from ray.tune.registry import ENV_CREATOR, _global_registry, register_env
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

import rllib_geppo.records.result_schema as result_schema
from rllib_geppo.records.checkpoint_manifest import write_manifest
from rllib_geppo.core import policy_weights as pw
from rllib_geppo.core import segments
from rllib_geppo.core.compiled_step import COMPILE_SETTINGS
from rllib_geppo.core.gradients import CLIP_BY, CLIP_SCOPES
from rllib_geppo.core.module_state import REWARD_SCALINGS, ModuleState
from rllib_geppo.core.networks import DEFAULT_MODEL_CONFIG
from rllib_geppo.core.objective import adapt_lr, tv_target
from rllib_geppo.core.policy_weights import effective_sample_size, with_lag
from rllib_geppo.core.segments import Segment, describe_nonfinite
from rllib_geppo.core.update_inputs import UPDATE_INPUTS, UpdateInputs
from rllib_geppo.sampling.env_checks import diagnose_env
from rllib_geppo.sampling.pipelines import lean
from rllib_geppo.sampling.episode_segments import segments_by_module
from rllib_geppo.rl_module.checks import check_module_spaces, trained_modules
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule, normalizes_observations, unread_model_config

logger = logging.getLogger(__name__)

#: What to do with an episode chunk holding a NaN or infinite reward or observation.
NONFINITE_DATA = ("error", "drop")
#: How the clip range follows a sampling lag (docs/overlapped_sampling.md).
LAG_CLIP_RULES = ("unlagged", "bound")

_NO_KL = ("GePPO has no KL penalty: the clip range (`clip_param`) and the TV-driven policy lr "
          "(`adaptive_lr`, `lr_adapt_factor`, `lr_adapt_min_ratio`) bound each update")
_NO_LEARNER_CONNECTOR = (
    "GePPO's learner computes its inputs (V-trace advantages over the whole store) itself and runs "
    "no learner connector; transform observations with an env-to-module connector "
    "(.env_runners(env_to_module_connector=...))")

#: PPO's and RLlib's training settings that GePPO does not use: name -> (GePPO's default, what to
#: use instead). validate() rejects any other value, before Ray starts (docs/algorithm.md).
UNUSED_SETTINGS: dict[str, tuple[object, str]] = {
    "vf_loss_coeff": (1.0, "the value function has its own Adam optimizer; set its step size "
                           "with `vf_lr`"),
    "use_kl_loss": (False, _NO_KL),
    "kl_coeff": (0.0, _NO_KL),
    "kl_target": (0.01, "GePPO's target is a total-variation change of eps/2 per update, set by "
                        "`clip_param`; `lr_adapt_min_ratio` sets the band below it"),
    "vf_clip_param": (math.inf, "GePPO never clips the value loss; `grad_clip_scope='all'` clips "
                                "the value gradient's norm together with the policy's"),
    "use_critic": (True, "GePPO always learns a value function (V-trace needs it)"),
    "use_gae": (True, "GePPO's advantages are always V-trace GAE; `lambda_` and `vtrace_clip` "
                      "set them (`lambda_=1.0`: Monte Carlo-like returns)"),
    "entropy_coeff_schedule": (None, "use a constant `entropy_coeff`"),
    "lr_schedule": (None, "GePPO adapts the policy lr from the TV each iteration; "
                          "`adaptive_lr=False` keeps `lr` fixed"),
    "train_batch_size": (4000, "set `train_batch_size_per_learner` (n, new env steps per "
                               "iteration and learner)"),
    "optimizer": ({}, "GePPO uses Adam for the policy and the value function; `lr`, `vf_lr` and "
                      "`adam_eps` set them"),
    "_learner_connector": (None, _NO_LEARNER_CONNECTOR),
    "add_default_connectors_to_learner_pipeline": (True, _NO_LEARNER_CONNECTOR),
}


def _agents_to_flatten(space, multi_agent: bool) -> list | None:
    """The agents whose observations are not Boxes (Dicts, Tuples, discretes), which RLlib's
    FlattenObservations makes flat Boxes (one-hot for discretes): ``[]`` for none, None for the
    single agent of a single-agent env."""
    if not multi_agent:
        return [] if isinstance(space, gym.spaces.Box) else None
    agents = space.spaces.items() if isinstance(space, gym.spaces.Dict) else ()
    return [agent for agent, agent_space in agents if not isinstance(agent_space, gym.spaces.Box)]


@functools.cache
def _warn_once(message: str) -> None:
    """Log ``message`` once per process: RLlib validates copies of a config again and again."""
    logger.warning(message)


def _same(value, default) -> bool:
    """``value == default``, False where comparing fails or gives no single bool (arrays)."""
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


@functools.lru_cache(maxsize=32)
def _solved_weights(batch_multiple: int, max_policies: int, kind: str, tradeoff: float,
                    tradeoff_rule: str) -> np.ndarray:
    # validate() and the Algorithm ask for nu, in every process: solve each program once.
    return pw.policy_weights(batch_multiple, max_policies, kind=kind, tradeoff=tradeoff,
                             tradeoff_rule=tradeoff_rule)


class GePPOConfig(PPOConfig):
    """Configuration for :class:`rllib_geppo.GePPO`.

    Every algorithm default is the paper's (Queeney et al. 2021, Appendix table): n = 1024 new
    samples per iteration, B = 2, optimal weights from M_max = 20 (M = 4,
    nu = [0.4, 0.3, 0.2, 0.1]), eps_PPO = 0.2 (eps_GePPO = 0.1), c_bar = 1, alpha = 0.03,
    beta = 0.5, gamma = 0.995, lambda = 0.97, 10 epochs x 32 minibatches, Adam with policy lr 3e-4
    (adapted) and value lr 3e-4 (fixed), policy grad-norm clip 0.5, no entropy bonus
    (``entropy_coeff=0``), no KL term, no value clipping, separate 64x64 tanh policy and value
    networks. Sampling runs on one EnvRunner with 2 envs (``num_envs_per_env_runner=1`` is the
    paper's single env) and evaluation on one env per EnvRunner. PPO settings that GePPO does
    not use (:data:`UNUSED_SETTINGS`: ``vf_loss_coeff``, ``use_kl_loss``, ``kl_coeff``,
    ``vf_clip_param``, ...) are rejected by :meth:`validate` unless left at their defaults.

    .. code-block:: python

        from rllib_geppo import GePPOConfig
        algo = GePPOConfig().environment("Hopper-v5").build_algo()
        result = algo.train()
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GePPO)
        # RLlib settings, set to the paper's values (PPO's RLlib defaults must not leak in).
        self.lr = 3e-4  # initial policy lr (eta); adapted each iteration
        self.gamma = 0.995
        self.lambda_ = 0.97
        self.clip_param = 0.2  # eps_PPO; GePPO clips at eps_PPO * clip_multiple(nu)
        self.num_epochs = 10
        self.minibatch_size = None  # derived: stored samples / num_minibatches
        self.train_batch_size_per_learner = 1024  # n, new env steps per iteration
        self.train_batch_size_per_env_runner = None  # the scale rule: n = this x EnvRunners
        self.grad_clip = 0.5  # policy only; the value function is never clipped
        self.grad_clip_by = "global_norm"
        self.use_kl_loss = False
        self.kl_coeff = 0.0
        self.entropy_coeff = 0.0
        self.vf_clip_param = math.inf
        # Sampling: one EnvRunner with 2 envs, about 1.4x the env steps/s of one env on 2 cores and
        # within one standard error of it per sample on Hopper and HalfCheetah
        # (docs/results/layouts). num_envs_per_env_runner=1 is the paper's single env.
        self.num_env_runners = 1
        self.num_envs_per_env_runner = 2
        # Evaluation by episodes on several envs keeps those that end first: evaluate on one.
        self.evaluation_config = {"num_envs_per_env_runner": 1}
        # The module's distribution is over env units (it normalises inside, see rl_module):
        # RLlib must not rescale samples, only clip them to the bounds for the env.
        self.normalize_actions = False
        self.clip_actions = True
        self.rl_module(model_config=copy.deepcopy(DEFAULT_MODEL_CONFIG))

        # GePPO settings (paper symbol in brackets).
        self.batch_multiple = 2  # B: PPO's batch N = B * n
        self.max_policies = 20  # M_max
        self.policy_weights = "optimal"  # "optimal" | "uniform" | explicit list nu
        self.weights_tradeoff = 1.0  # 1: max ESS (Thm 5); 0: max TV change (Thm 4)
        self.weights_tradeoff_rule = "scalarized"  # or "mixed" (the NeurIPS release's "mix")
        self.vtrace_clip = 1.0  # c_bar
        self.vf_lr = 3e-4
        self.num_minibatches = 32  # per epoch over the whole store (unless minibatch_size is set)
        self.adaptive_lr = True
        self.lr_adapt_factor = 0.03  # alpha
        self.lr_adapt_min_ratio = 0.5  # beta
        self.init_std_multiple = 1.0  # initial std = multiple * half the action range
        self.sample_reuse = True  # False: the paper's PPO baseline (M = 1, B*n steps, eps_PPO)
        self.overlap_sampling = "auto"  # sample the next batch while the learners update
        self.lag_clip_rule = "unlagged"  # or "bound": eps under that lag (docs/overlapped_sampling.md)
        self.adam_eps = 1e-8  # Adam's epsilon (torch's default; SB3 uses 1e-5)
        self.grad_clip_scope = "policy"  # or "all": one norm over policy and value (SB3)
        self.reward_scaling = "running_return"  # or "returns_to_go" (the authors' code)
        self.obs_stats_warm_start = False  # first update: statistics of the first batch
        self.nonfinite_data = "error"  # or "drop": what a NaN/inf reward or observation does
        self.compile_learner = "auto"  # torch.compile the minibatch step; "auto": after 3,200 steps
        self.stagger_starts = False  # cut the training envs' first episodes so they go out of phase
        self.max_failed_samples_in_a_row = 3  # then stop with the env's error (RLlib restarts for ever)
        self.sample_lag = None  # the youngest stored batch's age at an update; None: sampling's (0 or 1)

    @override(PPOConfig)
    def training(
        self,
        *,
        batch_multiple: int = NotProvided,
        max_policies: int = NotProvided,
        policy_weights: str | Sequence[float] = NotProvided,
        weights_tradeoff: float = NotProvided,
        weights_tradeoff_rule: str = NotProvided,
        vtrace_clip: float = NotProvided,
        vf_lr: float = NotProvided,
        num_minibatches: int = NotProvided,
        adaptive_lr: bool = NotProvided,
        lr_adapt_factor: float = NotProvided,
        lr_adapt_min_ratio: float = NotProvided,
        init_std_multiple: float = NotProvided,
        sample_reuse: bool = NotProvided,
        overlap_sampling: bool | str = NotProvided,
        lag_clip_rule: str = NotProvided,
        adam_eps: float = NotProvided,
        grad_clip_scope: str = NotProvided,
        reward_scaling: str = NotProvided,
        obs_stats_warm_start: bool = NotProvided,
        nonfinite_data: str = NotProvided,
        compile_learner: bool | str = NotProvided,
        stagger_starts: bool = NotProvided,
        train_batch_size_per_env_runner: int | None = NotProvided,
        max_failed_samples_in_a_row: int = NotProvided,
        sample_lag: int | None = NotProvided,
        **kwargs,
    ) -> "GePPOConfig":
        """Set training options; GePPO's own are below, RLlib's (``lr``, ``clip_param``,
        ``gamma``, ``lambda_``, ``num_epochs``, ``grad_clip``, ``train_batch_size_per_learner``,
        ``entropy_coeff``, ...) pass through to :meth:`PPOConfig.training`.

        ``entropy_coeff`` (default 0, the paper's) subtracts ``entropy_coeff`` times the
        weighted mean entropy of pi_theta, ``mean(w * H)`` in nats, from each minibatch's policy
        loss; a constant only. PPO's settings that GePPO does not use
        (:data:`UNUSED_SETTINGS`) must stay at their defaults.

        Args:
            train_batch_size_per_env_runner: the scale rule for adding samplers: each EnvRunner
                (or the driver, with ``num_env_runners=0``) collects this many new env steps
                per iteration, so n = this x max(1, ``num_env_runners``) and every env's share
                stays the same as EnvRunners are added; ``num_minibatches`` stays, so a
                minibatch grows with n and an update's sequential gradient steps do not.
                1024 on one EnvRunner is the paper's n. None (default): n is
                ``train_batch_size_per_learner`` x learners, whatever the EnvRunners
                (docs/cluster_and_gpu.md, "Scale one trial").
            max_failed_samples_in_a_row: how many samples in a row may fail with no env step
                before training stops with the environment's error. RLlib restarts failed EnvRunners (``restart_failed_env_runners``), which
                an environment that fails whenever it runs would have it do for ever. Default 3.
            batch_multiple: B, PPO's batch in units of n (N = B*n). Default 2.
            max_policies: M_max, most batch ages the weight optimiser may use. Default 20.
            policy_weights: "optimal" (paper's convex programs), "uniform", or an explicit
                list nu (index = age, 0 = current policy; sums to 1). Default "optimal".
            weights_tradeoff: in [0, 1]; 1 maximises effective sample size (Thm 5), 0 the TV
                change per sample (Thm 4). Default 1.
            weights_tradeoff_rule: how a tradeoff strictly between 0 and 1 is met:
                "scalarized" (default) solves one program weighing ESS against TV, each scaled
                by its range (the authors' later code); "mixed" averages the two extreme
                solutions (the NeurIPS release; 0.5 is its "mix").
            vtrace_clip: c_bar, truncation of the V-trace ratios. Default 1.0.
            vf_lr: value-function Adam learning rate (fixed). Default 3e-4.
            num_minibatches: minibatches per epoch over the whole store. Default 32.
            adaptive_lr: adapt the policy lr from the TV estimate (Algorithm 1). Default True.
            lr_adapt_factor: alpha; lr is divided/multiplied by 1 + alpha. Default 0.03.
            lr_adapt_min_ratio: beta; lr grows when TV < beta * eps/2. Default 0.5.
            init_std_multiple: initial policy std as a multiple of half the action range.
                Default 1.0 (paper: 0.5 on Ant and Humanoid).
            sample_reuse: False turns GePPO into the paper's PPO baseline: M = 1, B*n new
                samples per iteration, eps_PPO, plain GAE. Default True.
            overlap_sampling: the EnvRunners sample the next batch while the learners update,
                so the youngest stored batch is one iteration old at every update; the weights
                follow from the true ages (docs/overlapped_sampling.md). True, False, or "auto"
                (default): on wherever there is something to overlap, i.e. with sample reuse,
                at least one EnvRunner and the new API stack; off for the PPO baseline, which
                stays on-policy. See ``uses_overlapped_sampling``.
            lag_clip_rule: the clip range and TV target under overlapped sampling:
                "unlagged" (default) takes Lemma 4's eps_PPO / E_nu[i + 1] from the unlagged
                weights, synchronous GePPO's, so an update moves the policy as far as without
                the lag; "bound" applies Lemma 4 to the lagged weights, eps_PPO /
                (E_nu[i + 1] + lag), which keeps PPO's worst-case penalty and learned less per
                sample (docs/overlapped_sampling.md).
            adam_eps: epsilon of both Adam optimizers. Default 1e-8 (torch's; SB3 uses 1e-5).
            grad_clip_scope: what ``grad_clip`` clips: "policy" (default; the paper's: the
                value function is never clipped) or "all" (one norm over policy and value
                parameters together, as SB3).
            reward_scaling: the return whose std scales rewards: "running_return" (default;
                SB3's ``VecNormalize``: discounted sums of past rewards, carried across the
                chunks an episode is cut into, so the scale does not depend on how sampling
                was split) or "returns_to_go" (the authors' code: discounted returns-to-go
                within each collected chunk, which shorter chunks shrink).
            obs_stats_warm_start: install the first batch's observation statistics before
                the first update, which otherwise sees raw observations. Default False.
            nonfinite_data: what an episode chunk with a NaN or infinite reward or observation
                does: "error" (default) stops training with a message naming the environment,
                the column, the env step and the episode; "drop" drops the chunk before it
                reaches the store or the statistics, logs a warning and counts it in
                ``num_dropped_segments``.
            compile_learner: run each minibatch's forward pass, loss, backward pass, gradient
                clip and finite check as one ``torch.compile``d (inductor) function, compiled
                once per learner process (the time it took is logged); the Adam step stays
                eager. True (compiles at the first step, which waits for it), False, or "auto"
                (default): every learner, CPU or GPU, compiles after its first 3,200
                gradient steps (10 updates with the defaults), so short runs never compile;
                that update waits for the compile. With 2+ learners the compiled part ends
                before the clip, since the learners average their gradients in between.
                For the paper's 64x64 networks the compiled step measured 2x to 3x faster than
                eager on CPU (compiling took 2.6 to 11.7 s on 2 cores) and 3.1x on an H100
                (docs/speed.md). Where compiling fails the learner runs eagerly and logs one
                warning. New API stack only.
            sample_lag: the age, in updates, of the youngest stored batch at every update: the
                EnvRunners act with the policy that many updates older than the one being
                updated, as asynchronous EnvRunners would. None (default): what sampling gives,
                0 synchronous, 1 overlapped; an integer from that up to 16 holds the EnvRunners'
                weights back by the difference (a research setting, for the price of staleness;
                a restore syncs the newest weights and the lag builds up again). The weights
                follow the true ages, as under overlapped sampling.
            stagger_starts: cut the first episode of training env g of G (all EnvRunners'
                envs) after ``L - round(L * g / G)`` steps, L the env's time limit, so that envs
                whose episodes all last L steps do not stay in phase
                (:mod:`rllib_geppo.sampling.staggered_starts`). One env is never cut; evaluation envs
                are not. It removes a phase cycle of the value loss but measured no change in
                return (docs/results/layouts). Default False. New API stack only, with
                ``gym_env_vectorize_mode="SYNC"`` (RLlib's default).
        """
        super().training(**kwargs)
        for name, value in locals().items():
            if name not in ("self", "kwargs", "__class__") and value is not NotProvided:
                setattr(self, name, value)
        return self

    # -- Derived quantities (one place for each) ---------------------------------------------

    @property
    def nu(self) -> np.ndarray:
        """nu, the weight of each batch age (``[1.0]`` without sample reuse)."""
        if not self.sample_reuse:
            return np.ones(1)
        if isinstance(self.policy_weights, str):
            return _solved_weights(self.batch_multiple, self.max_policies, self.policy_weights,
                                   float(self.weights_tradeoff), self.weights_tradeoff_rule).copy()
        return pw.check_weights(self.policy_weights)

    @property
    def uses_overlapped_sampling(self) -> bool:
        """Whether the EnvRunners sample while the learners update (``overlap_sampling``
        resolved: "auto" means sample reuse, at least one EnvRunner and the new API stack)."""
        if self.overlap_sampling != "auto":
            return bool(self.overlap_sampling)
        return bool(self.sample_reuse and self.num_env_runners >= 1
                    and self.enable_env_runner_and_connector_v2)

    @property
    def max_sample_lag(self) -> int:
        """The oldest the youngest stored batch may be at an update, in updates: ``sample_lag``,
        or 1 if that is 0 or None (after a lost batch the next iteration samples before it
        updates; with still no batch the update waits: docs/overlapped_sampling.md)."""
        return max(1, self.sample_lag or 0)

    @property
    def held_back_updates(self) -> int:
        """How many updates the EnvRunners' weights trail the newest beyond what sampling
        gives (``sample_lag`` less 1 with overlapped sampling, less 0 without)."""
        return 0 if self.sample_lag is None else self.sample_lag - int(self.uses_overlapped_sampling)

    @property
    def clip_eps(self) -> float:
        """eps of the clipped objective without a sampling lag: eps_PPO / E_nu[i + 1] (Lemma 4)."""
        return self.clip_eps_at_lag(0)

    def clip_eps_at_lag(self, lag: int) -> float:
        """eps for an update whose youngest stored batch is ``lag`` iterations old: the same
        as without a lag, unless ``lag_clip_rule="bound"`` applies Lemma 4 to the weights
        shifted by the lag (docs/overlapped_sampling.md)."""
        nu = pw.with_lag(self.nu, lag) if self.lag_clip_rule == "bound" else self.nu
        return self.clip_param * pw.clip_multiple(nu)

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
        reuse = 1 if self.sample_reuse else self.batch_multiple
        return reuse * self.total_train_batch_size

    @property
    @override(PPOConfig)
    def _model_config_auto_includes(self) -> dict:
        return super()._model_config_auto_includes | {"init_std_multiple": self.init_std_multiple}

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
        # Dict, Tuple and discrete observations reach the module flattened (RLlib's
        # FlattenObservations, which also writes them into the episodes: the store holds them flat).
        agents = _agents_to_flatten(pipeline.input_observation_space, self.is_multi_agent)
        if agents != [] and not any(isinstance(piece, FlattenObservations) for piece in pipeline.connectors):
            pipeline.prepend(FlattenObservations(multi_agent=self.is_multi_agent, agent_ids=agents,
                                                 as_learner_connector=False))
        # RLlib's pieces, run without per-piece bookkeeping on every env step (see the module).
        return lean(pipeline, device=device)

    @override(PPOConfig)
    def build_module_to_env_connector(self, env=None, spaces=None):
        pipeline = super().build_module_to_env_connector(env=env, spaces=spaces)
        return lean(pipeline, normalize_actions=self.normalize_actions, clip_actions=self.clip_actions)

    @override(PPOConfig)
    def validate(self) -> None:
        # GePPO's checks first, all reported at once (a config copied from PPO often holds
        # several settings GePPO refuses): RLlib's own trip over some bad values (an lr list
        # that is no schedule) with messages that name neither the setting nor a fix.
        problems = self.refused_settings()
        if problems:
            self._value_error(problems[0] if len(problems) == 1 else (
                f"GePPO cannot run with {len(problems)} settings of this config; fix them all:\n"
                + "\n".join(f"  - {problem}" for problem in problems)))
        # PPOConfig.validate compares minibatch_size with the new samples per learner (and
        # explains it with PPO's split of the train batch); GePPO's minibatches come from the
        # whole store, which refused_settings checks, so RLlib's check runs without it (on the
        # old stack it compares with train_batch_size, which fails on None: 1 stands in).
        minibatch_size, self.minibatch_size = self.minibatch_size, (
            None if self.enable_rl_module_and_learner else 1)
        try:
            super().validate()
        finally:
            self.minibatch_size = minibatch_size
        self._warn_on_episode_evaluation_over_envs()
        if self.env_runner_cls is None and self.enable_env_runner_and_connector_v2 and not self.output:
            from rllib_geppo.sampling.env_runner import GePPOEnvRunner, GePPOMultiAgentEnvRunner

            # RLlib's, with independent seeds, or with its rewards checked (the module doc).
            self.env_runner_cls = GePPOMultiAgentEnvRunner if self.is_multi_agent else GePPOEnvRunner

    def _warn_on_episode_evaluation_over_envs(self) -> None:
        """RLlib ends an evaluation of N episodes when the first N end across its envs, which keeps
        the shortest where episodes can end early (a Hopper that falls): a biased return."""
        if not self.evaluation_interval or self.evaluation_duration_unit != "episodes":
            return
        evaluation = self.get_evaluation_config_object()  # None for an evaluation config itself
        num_envs = evaluation.num_envs_per_env_runner if evaluation is not None else 1
        if num_envs > 1:
            _warn_once(
                f"Evaluation by episodes on {num_envs} envs per EnvRunner keeps the episodes that "
                "end first, the shortest where episodes can end early, so its return is biased. "
                "Fix: .evaluation(evaluation_config={'num_envs_per_env_runner': 1}).")

    def refused_settings(self) -> list[str]:
        """Every setting of this config that GePPO cannot run with, one message each, naming
        the setting and the fix (empty: none); ``validate()`` raises them together."""
        problems = []
        if self.framework_str != "torch":
            problems.append(f"GePPO is implemented in torch; got framework={self.framework_str!r}. "
                            "Fix: .framework('torch').")
        if self.is_multi_agent and not self.enable_env_runner_and_connector_v2:
            problems.append("GePPO trains multi-agent configs on RLlib's new API stack only. Fix: "
                            "remove .api_stack(...), or the .multi_agent(...) settings.")
        if self.model_config.get("use_lstm") or self.model_config.get("use_attention"):
            problems.append(
                "GePPO trains feed-forward models only (use_lstm / use_attention): it re-evaluates "
                "every stored sample under the current policy one sample at a time, without the "
                "recurrent state and sequence that sample was collected with. Fix: leave "
                "use_lstm off and stack recent observations in the environment instead "
                "(rllib_geppo.StackFrames, docs/your_environment.md).")
        problems += self._geppo_setting_problems()
        if self.normalize_actions:
            problems.append(
                "`normalize_actions` must be False: GePPO's RLModule already maps its actions to "
                "the environment's units with the action bounds it holds, and RLlib would rescale "
                "them a second time. Fix: .environment(normalize_actions=False); clip_actions=True "
                "keeps the actions within the bounds.")
        for where, model_config in self._geppo_model_configs().items():
            problems += [f"{where}{problem}" for problem in unread_model_config(model_config)]
        return problems + self._unused_setting_problems()

    def _geppo_model_configs(self) -> dict[str, Any]:
        """The model configs that GePPO's own RLModule is built with, by where they are set
        ("" for ``.rl_module(model_config=...)``); a user's RLModule reads its own."""
        spec = self._rl_module_spec
        specs = getattr(spec, "rl_module_specs", spec)
        specs = specs if isinstance(specs, dict) else {None: specs}

        def ours(module_spec) -> bool:
            return getattr(module_spec, "module_class", None) in (None, GePPOTorchRLModule)

        configs = {"": self._model_config} if any(map(ours, specs.values())) else {}
        for module_id, module_spec in specs.items():
            if ours(module_spec) and getattr(module_spec, "model_config", None):
                where = f"module {module_id!r}: " if module_id is not None else "rl_module_spec: "
                configs[where] = module_spec.model_config
        return configs

    def _geppo_setting_problems(self) -> list[str]:
        problems: list[str] = []
        failed: set[str] = set()

        def require(ok: bool, setting: str, allowed: str) -> None:
            if not ok:
                failed.add(setting)
                problems.append(f"`{setting}` must be {allowed}; got {getattr(self, setting)!r}.")

        def is_number(x) -> bool:
            return (isinstance(x, (int, float, np.floating)) and not isinstance(x, bool)
                    and math.isfinite(x))

        def is_count(x, low: int) -> bool:
            return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= low

        require(is_count(self.batch_multiple, 1), "batch_multiple", "an integer >= 1")
        require(is_count(self.max_policies, self.batch_multiple if is_count(self.batch_multiple, 1) else 1),
                "max_policies", f"an integer >= batch_multiple ({self.batch_multiple})")
        require(self.policy_weights in pw.KINDS or not isinstance(self.policy_weights, str),
                "policy_weights", f"one of {pw.KINDS} or a list of weights")
        require(is_number(self.weights_tradeoff) and 0 <= self.weights_tradeoff <= 1,
                "weights_tradeoff", "a number in [0, 1]")
        require(self.weights_tradeoff_rule in pw.TRADEOFF_RULES, "weights_tradeoff_rule",
                f"one of {pw.TRADEOFF_RULES}")
        require(self.nonfinite_data in NONFINITE_DATA, "nonfinite_data", f"one of {NONFINITE_DATA}")
        require(isinstance(self.compile_learner, bool) or self.compile_learner == "auto",
                "compile_learner", f"one of {COMPILE_SETTINGS}")
        require(isinstance(self.overlap_sampling, bool) or self.overlap_sampling == "auto",
                "overlap_sampling", 'True, False or "auto"')
        require(self.lag_clip_rule in LAG_CLIP_RULES, "lag_clip_rule", f"one of {LAG_CLIP_RULES}")
        require(self.grad_clip_by in CLIP_BY, "grad_clip_by", f"one of {CLIP_BY}")
        require(self.grad_clip_scope in CLIP_SCOPES, "grad_clip_scope", f"one of {CLIP_SCOPES}")
        require(self.reward_scaling in REWARD_SCALINGS, "reward_scaling", f"one of {REWARD_SCALINGS}")
        require(isinstance(self.obs_stats_warm_start, bool), "obs_stats_warm_start", "True or False")
        require(isinstance(self.stagger_starts, bool), "stagger_starts", "True or False")
        require(is_count(self.max_failed_samples_in_a_row, 1), "max_failed_samples_in_a_row", "an integer >= 1")
        # Whether sampling overlaps depends on num_env_runners, checked below.
        base_lag = int(self.uses_overlapped_sampling) if is_count(self.num_env_runners, 0) else 0
        require(self.sample_lag is None or (is_count(self.sample_lag, base_lag) and self.sample_lag <= 16),
                "sample_lag", f"None or an integer from {base_lag} (what "
                f"{'overlapped' if base_lag else 'synchronous'} sampling gives) to 16")
        require(is_number(self.adam_eps) and self.adam_eps > 0, "adam_eps", "a finite positive number")
        require(is_number(self.vtrace_clip) and self.vtrace_clip > 0, "vtrace_clip", "> 0")
        require(is_number(self.lr) and self.lr > 0, "lr",
                "a finite positive number (GePPO adapts the policy lr itself; schedules are not "
                "supported)")
        require(is_number(self.vf_lr) and self.vf_lr > 0, "vf_lr", "a finite positive number")
        require(is_number(self.clip_param) and 0 < self.clip_param < 1, "clip_param", "in (0, 1)")
        require(is_number(self.gamma) and 0 < self.gamma <= 1, "gamma", "in (0, 1]")
        require(is_number(self.lambda_) and 0 <= self.lambda_ <= 1, "lambda_", "in [0, 1]")
        require(is_count(self.num_epochs, 1), "num_epochs", "an integer >= 1")
        require(is_count(self.num_minibatches, 1), "num_minibatches", "an integer >= 1")
        require(self.minibatch_size is None or is_count(self.minibatch_size, 1), "minibatch_size",
                "None (derived from num_minibatches) or an integer >= 1")
        # RLlib's own counts, checked here because RLlib fails on them only once Ray runs.
        require(is_count(self.num_env_runners, 0), "num_env_runners",
                "an integer >= 0 (0 samples in the driver)")
        require(is_count(self.num_envs_per_env_runner, 1), "num_envs_per_env_runner", "an integer >= 1")
        require(is_count(self.num_learners, 0), "num_learners", "an integer >= 0 (0: a local learner)")
        require(self.seed is None or is_count(self.seed, 0), "seed", "None or an integer >= 0")
        require(is_number(self.lr_adapt_factor) and self.lr_adapt_factor >= 0,
                "lr_adapt_factor", ">= 0")
        require(is_number(self.lr_adapt_min_ratio) and 0 <= self.lr_adapt_min_ratio <= 1,
                "lr_adapt_min_ratio", "in [0, 1]")
        require(is_number(self.init_std_multiple) and self.init_std_multiple > 0,
                "init_std_multiple", "> 0")
        require(self.grad_clip is None or (is_number(self.grad_clip) and self.grad_clip > 0),
                "grad_clip", "None or > 0")
        min_batch = self.num_minibatches if is_count(self.num_minibatches, 1) else 1
        require(is_count(self.train_batch_size_per_learner, min_batch), "train_batch_size_per_learner",
                f"an integer >= num_minibatches ({self.num_minibatches})")
        require(self.train_batch_size_per_env_runner is None
                or is_count(self.train_batch_size_per_env_runner, min_batch),
                "train_batch_size_per_env_runner",
                f"None or an integer >= num_minibatches ({self.num_minibatches})")
        nu = None
        if not failed & {"batch_multiple", "max_policies", "policy_weights", "weights_tradeoff",
                         "weights_tradeoff_rule"}:  # nu is solved from these
            try:
                nu = self.nu
            except ValueError as err:
                problems.append(f"`policy_weights`: {err}")
        if nu is not None and self.minibatch_size is not None and not failed & {
                "minibatch_size", "num_learners", "num_env_runners", "train_batch_size_per_learner",
                "train_batch_size_per_env_runner"}:
            stored = len(nu) * self.samples_per_iteration // max(1, self.num_learners)
            require(self.minibatch_size <= stored, "minibatch_size",
                    f"None or at most the samples each learner holds in the full store ({stored}: "
                    f"{len(nu)} batches of {self.samples_per_iteration} new samples"
                    + (f" over {self.num_learners} learners" if self.num_learners > 1 else "")
                    + "), from which GePPO draws its minibatches")
        if not self.enable_env_runner_and_connector_v2:
            for setting, new_stack_only in (("overlap_sampling", True), ("grad_clip_scope", "all"),
                                            ("compile_learner", True), ("stagger_starts", True)):
                if getattr(self, setting) == new_stack_only:  # "auto" samples synchronously there
                    problems.append(f"`{setting}={new_stack_only!r}` runs on the new API stack "
                                    "only; leave it at its default on the old API stack.")
        if self.is_multi_agent and self.stagger_starts:
            problems.append("`stagger_starts=True` runs with single-agent environments only; leave "
                            "it at False with .multi_agent(...).")
        require(is_number(self.entropy_coeff) and self.entropy_coeff >= 0, "entropy_coeff",
                "a finite number >= 0 (a constant; schedules are not supported)")
        return problems

    def _unused_setting_problems(self) -> list[str]:
        """Any value but GePPO's default of a setting in :data:`UNUSED_SETTINGS`."""
        problems = []
        for setting, (default, instead) in UNUSED_SETTINGS.items():
            value = getattr(self, setting)
            if not _same(value, default):
                name = setting.lstrip("_")
                problems.append(f"`{name}={value!r}`: GePPO does not use `{name}` (leave it "
                                f"at {default!r}): {instead}.")
        return problems


#: Checkpoint component holding each trained module's store, adapted lr and running statistics.
COMPONENT_GEPPO = "geppo"
#: A batch that changes the reward scale by more than this factor gets a warning.
REWARD_SCALE_JUMP = 1000.0
#: The logger through which RLlib reports the errors of remote EnvRunners it tolerates.
ACTOR_MANAGER_LOGGER = "ray.rllib.utils.actor_manager"


def is_class_path(env: Any) -> bool:
    """Whether ``env`` is a class path ("pkg.envs.MyEnv"): a string with a dot that is neither a
    Tune name nor a gymnasium id (registered, or "module:Id")."""
    return (isinstance(env, str) and "." in env and ":" not in env and env not in gym.registry
            and not _global_registry.contains(ENV_CREATOR, env))


class NonFiniteDataError(ValueError):
    """An environment returned a NaN or infinite reward or observation."""


class EnvRunnerFailedError(RuntimeError):
    """Sample after sample failed in the EnvRunners (an environment that fails whenever it runs)."""


class LastEnvRunnerError(logging.Handler):
    """The last EnvRunner error RLlib's actor manager logged (it logs the remote errors of a
    sample it tolerates, and goes on): attached to that logger while the Algorithm lives."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self._last: BaseException | None = None
        logging.getLogger(ACTOR_MANAGER_LOGGER).addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, BaseException):
            self._last = record.msg

    def pop(self) -> BaseException | None:
        """The last error since the previous call, or None."""
        last, self._last = self._last, None
        return last

    @staticmethod
    def describe(error: BaseException | None) -> str:
        """``Type: first line of the message`` of the error an EnvRunner raised (unwrapped from
        Ray's ``RayTaskError``), for a one-line message; the whole error is chained to it."""
        if error is None:
            return "none reported"
        cause = getattr(error, "cause", None)
        error = cause if isinstance(cause, BaseException) else error
        lines = str(error).strip().splitlines()
        return f"{type(error).__name__}: {lines[0].removesuffix('.')}" if lines else type(error).__name__

    def close(self) -> None:
        logging.getLogger(ACTOR_MANAGER_LOGGER).removeHandler(self)
        super().close()


class EnvRunnerTimeoutError(TimeoutError):
    """EnvRunners did not answer within ``sample_timeout_s`` (an environment that blocks)."""


class GePPO(PPO):
    """Generalized Proximal Policy Optimization with Sample Reuse (Queeney et al., 2021).

    Every trained module (one, or one per policy of a multi-agent config) has a
    :class:`~rllib_geppo.core.module_state.ModuleState`: its sample store, running statistics
    and adapted lr (:meth:`module_state`). All modules update together, once per iteration.
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
        self.nu = config.nu  # weight of each batch age at lag 0
        self.policy_version = 0  # version of pi_k: the learners' weights_seq_no
        self.module_states = {
            module_id: ModuleState(len(self.nu), policy_lr=config.lr, gamma=config.gamma,
                                   reward_scaling=config.reward_scaling,
                                   track_obs_stats=normalizes_observations(observation_spaces[module_id]))
            for module_id in trained_modules(config)}
        self._seed_root = config.seed if config.seed is not None else np.random.SeedSequence().entropy
        self._sampler = ThreadPoolExecutor(1, "geppo-sampler") if config.uses_overlapped_sampling else None
        self._result_keys: list[result_schema.Path] | None = None  # set by the first result
        self._env_runner_errors = LastEnvRunnerError()  # what RLlib logged of a failed sample
        self._failed_samples_in_a_row = 0
        self._no_env_step_since: float | None = None  # time.monotonic() of the first empty sample
        self._last_env_runner_error: BaseException | None = None
        self._env_runner_restarts: dict[tuple[bool, int], int] = {}
        # The policies the EnvRunners act with next, oldest first (config.sample_lag), from pi_0.
        self._held_back_policies: deque[dict] = deque(maxlen=config.held_back_updates + 1)
        if config.held_back_updates:
            self._held_back_policies.append(self._acting_state())

    def module_state(self, module_id: str = DEFAULT_MODULE_ID) -> ModuleState:
        """The store, running statistics and policy lr of a trained module (default: the
        single-agent module)."""
        return self.module_states[module_id]

    @override(PPO)
    def training_step(self) -> None:
        if not self.config.enable_env_runner_and_connector_v2:
            from rllib_geppo.old_stack.training_step import training_step_old_api_stack

            return training_step_old_api_stack(self)
        if self._sampler is not None and any(self.may_update(m, quiet=True) for m in self.module_states):
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
        self._count_failed_samples(sum(map(len, episodes)))
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        self.metrics.log_value((TIMERS, ENV_RUNNER_SAMPLING_TIMER), seconds)
        new_segments = segments_by_module(episodes, multi_agent=self.config.is_multi_agent)
        for module_id in self.module_states:
            dropped = self.add_to_store(new_segments.get(module_id, []), module_id)
            self.metrics.log_value((LEARNER_RESULTS, module_id, "num_dropped_segments"), dropped, window=1)

    def _count_failed_samples(self, steps: int) -> None:
        """Stop the run with the environment's error once ``max_failed_samples_in_a_row``
        samples in a row failed with no env step (iterations whose EnvRunners were only being
        restarted, sampling nothing and failing nothing, do not break the row): RLlib restarts
        failed EnvRunners for ever, and an env that fails whenever it runs would keep the run
        going without a sample. Stop it too once no env step came for
        ``env_runner_restore_timeout_s`` while no error was reported: EnvRunners that never come
        back (a restart whose constructor fails) fail their health checks without a log line."""
        failure = self._env_runner_errors.pop()
        self._last_env_runner_error = failure or self._last_env_runner_error
        if steps:
            self._failed_samples_in_a_row = 0
            self._no_env_step_since = None
            return
        if self._no_env_step_since is None:
            self._no_env_step_since = time.monotonic()
        if failure is None:  # nothing sampled and nothing failed: EnvRunners being restored
            self._check_restore_timeout()
            return
        self._failed_samples_in_a_row += 1
        if self._failed_samples_in_a_row >= self.config.max_failed_samples_in_a_row:
            error = self._last_env_runner_error
            problem = diagnose_env(self.env_creator, self.config.env_config)
            found = (f"Made in the driver and run with random actions, it shows the problem: {problem}."
                     if problem else "It runs cleanly in the driver with random actions (the "
                     "EnvRunners' logs hold their tracebacks).")
            raise EnvRunnerFailedError(
                f"iteration {self.iteration + 1}: {self._failed_samples_in_a_row} "
                f"sample{'s' if self._failed_samples_in_a_row > 1 else ''} in a row "
                f"failed with no env step (RLlib restarted the EnvRunners in between), so "
                f"environment {self.config.env!r} seems to fail whenever it runs. The last "
                f"EnvRunner error: {LastEnvRunnerError.describe(error)}. {found} Fix the "
                "environment; max_failed_samples_in_a_row sets how many such samples stop the "
                "run.") from error

    def _check_restore_timeout(self) -> None:
        waited = time.monotonic() - self._no_env_step_since
        if waited > self.config.env_runner_restore_timeout_s:
            raise EnvRunnerFailedError(
                f"iteration {self.iteration + 1}: no env step for {waited:.0f} s, and no EnvRunner "
                "reported an error: the EnvRunners RLlib is restoring do not come back (a restart "
                "whose environment or constructor fails, or a lost node). The last EnvRunner "
                f"error: {LastEnvRunnerError.describe(self._last_env_runner_error)}. The EnvRunners' logs "
                "hold the cause; .fault_tolerance(env_runner_restore_timeout_s=...) sets how long "
                "to wait (RLlib's default: 1,800 s).") from self._last_env_runner_error

    @override(Algorithm)
    def restore_env_runners(self, env_runner_group) -> list[int]:
        # A restarted EnvRunner gets new seeds, derived from its restart count (not a replay).
        restored = super().restore_env_runners(env_runner_group)
        for index in restored:
            key = (env_runner_group is self.eval_env_runner_group, index)
            self._env_runner_restarts[key] = restarts = self._env_runner_restarts.get(key, 0) + 1
            env_runner_group.foreach_env_runner(
                lambda runner, n=restarts: runner.reseed(n) if hasattr(runner, "reseed") else None,
                remote_worker_ids=[index], local_env_runner=False)
        return restored

    def add_to_store(self, new_segments: Sequence[Segment], module_id: str = DEFAULT_MODULE_ID) -> int:
        """Check a module's new segments, store them as its batch of this iteration and fold
        them into its running statistics (both API stacks). Returns the number dropped."""
        kept = self._finite_segments(new_segments)
        if not kept:
            logger.warning("iteration %d collected no usable samples for module %r; its store is "
                           "unchanged.", self.iteration + 1, module_id)
            return len(new_segments)
        state = self.module_state(module_id)
        before = state.reward_scale
        change = state.add(kept)
        if change > REWARD_SCALE_JUMP:
            logger.warning(
                "iteration %d: environment %r returned a %s, which changes the reward scale "
                "(the std of the discounted return) %.3g times, from %.3g to %.3g. Every reward "
                "is divided by that scale from now on, so the others count for next to nothing "
                "(docs/bad_input.md). Check the environment's rewards.", self.iteration + 1,
                self.config.env, segments.describe_largest_reward(kept), change, before,
                state.reward_scale)
        return len(new_segments) - len(kept)

    def _finite_segments(self, new_segments: Sequence[Segment]) -> list[Segment]:
        """The segments without NaN or infinite rewards and observations. Others raise
        NonFiniteDataError, or with ``nonfinite_data="drop"`` are dropped and logged."""
        kept = []
        for segment in new_segments:
            problem = describe_nonfinite(segment)
            if problem is None:
                kept.append(segment)
                continue
            where = f"Environment {self.config.env!r} returned a non-finite {problem} in episode {segment.episode_id}"
            if self.config.nonfinite_data == "error":
                raise NonFiniteDataError(
                    f"{where}. Nothing of it reached the store, the statistics or the weights. Fix the "
                    "environment, or set .training(nonfinite_data='drop') to drop such episode "
                    "chunks and go on.")
            logger.warning("%s: dropped that chunk (%d steps).", where, len(segment))
        return kept

    def _update_learners(self) -> None:
        """One update of every module that :meth:`may_update`, then each one's lr rule."""
        inputs = {module_id: self.update_inputs(module_id)
                  for module_id in self.module_states if self.may_update(module_id)}
        if not inputs:
            return
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            self.metrics.aggregate(self.update_learner_group(inputs), key=LEARNER_RESULTS)
        for module_id, module_inputs in inputs.items():
            for key, value in self.store_metrics(module_inputs, module_id).items():
                self.metrics.log_value((LEARNER_RESULTS, module_id, key), value, window=1)
            learner = self.metrics.peek((LEARNER_RESULTS, module_id))
            if not learner["num_gradient_steps"]:
                logger.info("iteration %d: module %r has fewer stored samples than learners; no "
                            "gradient step this iteration.", self.iteration + 1, module_id)
                continue
            self.adapt_policy_lr(learner["tv"], module_inputs.clip_eps, module_id=module_id,
                                 complete=learner["num_skipped_steps"] < learner["num_gradient_steps"])
        self.record_update(inputs)  # after the metrics, which describe the update as it ran

    def record_update(self, module_ids: Collection[str]) -> None:
        """The learners took an update of ``module_ids``, which made pi_k's version + 1: those
        modules' samples age by one, the others' do not (:mod:`rllib_geppo.core.module_state`)."""
        for module_id in module_ids:
            self.module_state(module_id).record_update(self.policy_version + 1)

    def update_learner_group(self, inputs: dict[str, UpdateInputs]) -> list[dict[str, Any]]:
        """One update of every learner over the stores of the modules in ``inputs`` (module ->
        its :class:`UpdateInputs`); each learner's results.

        Every learner gets all stored samples, so that V-trace runs over whole episodes
        whatever their length, and trains on its slice of each global minibatch
        (:mod:`rllib_geppo.core.minibatches`); remote learners read one copy of the store from
        Ray's object store.
        """
        layouts = {module_id: self.module_state(module_id).store.update_layout() for module_id in inputs}
        batch = MultiAgentBatch({module_id: SampleBatch(layout) for module_id, layout in layouts.items()},
                                env_steps=max(segments.num_steps(layout) for layout in layouts.values()))
        if self.learner_group.is_local:
            data = {"batch": batch}
        else:
            data = {"batch_refs": [ray.put(batch)] * len(self.learner_group)}
        return self.learner_group.update(**data, timesteps={
            UPDATE_INPUTS: inputs,
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0),
        })

    def may_update(self, module_id: str = DEFAULT_MODULE_ID, *, quiet: bool = False) -> bool:
        """Whether a module's store holds a batch young enough to update on: none older than
        ``config.max_sample_lag`` updates is (both API stacks; logs why not unless ``quiet``)."""
        store = self.module_state(module_id).store
        if not store.batches:
            return False
        if self.sample_lag(module_id) > self.config.max_sample_lag:
            if not quiet:
                logger.warning("iteration %d: no new batch arrived for module %r; its update waits "
                               "for one (the youngest stored batch is %d iterations old).",
                               self.iteration + 1, module_id, self.sample_lag(module_id))
            return False
        return True

    def update_inputs(self, module_id: str = DEFAULT_MODULE_ID) -> UpdateInputs:
        """A module's :class:`UpdateInputs` for this update, from its store's ages under pi_k."""
        state = self.module_state(module_id)
        obs_mean, obs_std = state.obs_moments()
        return UpdateInputs(
            policy_lr=state.policy_lr,
            clip_eps=self.config.clip_eps_at_lag(self.sample_lag(module_id)),
            weights_by_version=state.store.weights_by_version(self.lagged_nu(module_id), state.version),
            reward_scale=state.reward_scale,
            obs_mean=obs_mean,
            obs_std=obs_std,
            minibatches_per_epoch=self._minibatches_per_epoch(module_id),
            shuffle_seed=self.shuffle_seed(),
            obs_stats_before_update=self.config.obs_stats_warm_start and state.version == 0,
        )

    def shuffle_seed(self) -> int:
        """The seed of this update's minibatch shuffles: from the trial's seed (``seed``, else
        one drawn at set-up) and pi_k's version, so a restored run shuffles as the original."""
        return int(np.random.SeedSequence([self._seed_root, self.policy_version]).generate_state(1)[0])

    def sample_lag(self, module_id: str = DEFAULT_MODULE_ID) -> int:
        """Age of a module's youngest stored batch under pi_k, in the module's own updates: 0,
        or 1 with overlapped sampling (``config.sample_lag`` where that is set)."""
        state = self.module_state(module_id)
        return state.store.ages(state.version)[0]

    def lagged_nu(self, module_id: str = DEFAULT_MODULE_ID) -> np.ndarray:
        """nu for a module's store as it is: shifted by :meth:`sample_lag` (``core.policy_weights.with_lag``)."""
        return with_lag(self.nu, self.sample_lag(module_id))

    def _minibatches_per_epoch(self, module_id: str) -> int:
        if not self.config.minibatch_size:
            return self.config.num_minibatches
        per_learner = self.module_state(module_id).store.num_steps // max(1, self.config.num_learners)
        return max(1, per_learner // self.config.minibatch_size)

    def adapt_policy_lr(self, tv: float, clip_eps: float, *, complete: bool = True,
                        module_id: str = DEFAULT_MODULE_ID) -> None:
        """Algorithm 1's lr rule: one decision per iteration from a module's TV estimate.

        The lr stays as it is after an update whose every step was skipped (``complete=False``)
        or whose TV is not finite: there is nothing to learn from about the step size.
        """
        if not self.config.adaptive_lr:
            return
        state = self.module_state(module_id)
        if not complete or not np.isfinite(tv):
            logger.warning("iteration %d: the update of module %r was not finite (TV %s); its policy "
                           "lr stays %.3g.", self.iteration + 1, module_id, tv, state.policy_lr)
            return
        state.policy_lr = adapt_lr(state.policy_lr, tv, clip_eps, factor=self.config.lr_adapt_factor,
                                   min_ratio=self.config.lr_adapt_min_ratio)

    def store_metrics(self, inputs: UpdateInputs, module_id: str = DEFAULT_MODULE_ID) -> dict[str, float]:
        """Per-iteration metrics of a module's store and update inputs (both API stacks)."""
        state = self.module_state(module_id)
        active = list(state.store.active_weights(self.lagged_nu(module_id), state.version).values())
        return {
            "tv_target": tv_target(inputs.clip_eps),
            "clip_eps": inputs.clip_eps,
            "num_policies": len(state.store.batches),
            "sample_lag": self.sample_lag(module_id),
            "effective_sample_size": effective_sample_size(active, self.config.samples_per_iteration),
            "reward_scale": inputs.reward_scale,
        }

    def _sync_env_runner_weights(self, *, force: bool = False) -> None:
        """Give every EnvRunner the policy it acts with next, with its version, and wait: the
        learners' newest, pi_k from here on, or with ``sample_lag`` set the one
        ``config.held_back_updates`` updates older (pi_0 while there is none that old).

        RLlib's ``sync_weights`` is fire-and-forget and drops requests to busy actors; GePPO's
        ages need every batch tagged with the policy that really collected it, so the sync here
        is blocking, with ``sample_timeout_s`` as its limit (an EnvRunner stuck in an env's
        ``step()`` fails the run instead of hanging it).

        An EnvRunner loads weights only with a version above its own, but takes the version
        anyway. ``force=True`` (after a restore, whose version may be older than the EnvRunners')
        loads them regardless, on the evaluation EnvRunners too: first without a version, which
        RLlib's ``set_state`` always loads, then the version alone.
        """
        state = self._acting_state()
        if force:
            self._held_back_policies.clear()
        self._held_back_policies.append(state)
        ref = ray.put(self._held_back_policies[0])

        def sync(runner) -> bool:
            new = ray.get(ref)
            if force:
                runner.set_state({COMPONENT_RL_MODULE: new[COMPONENT_RL_MODULE]})
            runner.set_state(new)
            return True

        groups = [self.env_runner_group]
        if force and self.eval_env_runner_group is not None:
            groups.append(self.eval_env_runner_group)
        for group in groups:
            self._wait_on_env_runners(group, sync, "take the new weights")
        self.policy_version = state[WEIGHTS_SEQ_NO]

    def _acting_state(self) -> dict[str, Any]:
        """The learners' policy as the EnvRunners take it: the inference-only module and its version."""
        state = self.learner_group.get_state(
            components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True)[COMPONENT_LEARNER]
        return {COMPONENT_RL_MODULE: state[COMPONENT_RL_MODULE], WEIGHTS_SEQ_NO: state[WEIGHTS_SEQ_NO]}

    def _wait_on_env_runners(self, group, fn, what: str) -> list:
        """``fn`` on every healthy EnvRunner of ``group`` (and its local one), waiting at most
        ``sample_timeout_s``. If any does not answer in time, the group's remote EnvRunners are
        killed and EnvRunnerTimeoutError names the cause."""
        timeout = self.config.sample_timeout_s  # None: wait as long as it takes
        results = group.foreach_env_runner(fn, local_env_runner=True, timeout_seconds=timeout)
        # After the call: an EnvRunner that died meanwhile is unhealthy (RLlib restarts it);
        # one that is healthy but did not answer is busy in its environment.
        expected = group.num_healthy_remote_workers() + (1 if group.local_env_runner is not None else 0)
        if len(results) < expected and timeout is not None:
            group.reset([])  # kills the remote EnvRunners, so that stopping does not wait on them
            raise EnvRunnerTimeoutError(
                f"iteration {self.iteration + 1}: {expected - len(results)} of {expected} EnvRunners did "
                f"not {what} within {timeout:g} s (sample_timeout_s). An EnvRunner is busy while its "
                f"environment's step() or reset() runs: environment {self.config.env!r} may block. Fix "
                "the environment, or raise sample_timeout_s if its steps are that slow.")
        return results

    @override(Algorithm)
    def save_to_path(self, path=None, *args, **kwargs) -> str:
        path = super().save_to_path(path, *args, **kwargs)
        if kwargs.get("filesystem") is None and "://" not in str(path):
            self._write_manifest(path)
        return path

    @override(Algorithm)
    def save_checkpoint(self, checkpoint_dir: str) -> None:
        super().save_checkpoint(checkpoint_dir)  # the new stack's goes through save_to_path
        if not self.config.enable_rl_module_and_learner:
            self._write_manifest(checkpoint_dir)

    def _write_manifest(self, path) -> None:
        """Each file's size and checksum, and the iteration saved (:mod:`rllib_geppo.records.checkpoint_manifest`)."""
        write_manifest(path, training_iteration=self.iteration)

    @override(Algorithm)
    def restore_from_path(self, path, *args, **kwargs) -> None:
        super().restore_from_path(path, *args, **kwargs)
        if self.config.enable_env_runner_and_connector_v2:
            self._sync_env_runner_weights(force=True)

    @override(Algorithm)
    def log_result(self, result: dict[str, Any]) -> None:
        # The same keys in every result, also across a resume: Tune writes progress.csv's
        # columns from the first result (rllib_geppo.records.result_schema). In place: train() returns it.
        if self._result_keys is None:
            new_stack = self.config.enable_env_runner_and_connector_v2
            late = [key for module_id in self.module_states for key in result_schema.late_keys(module_id)]
            self._result_keys = result_schema.schema(result, late if new_stack else ())
        else:
            self._result_keys = result_schema.grow(self._result_keys, result)
        complete = result_schema.with_keys(result, self._result_keys)
        result.clear()
        result.update(complete)
        super().log_result(result)

    @override(Algorithm)
    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.shutdown(wait=True)
        self._env_runner_errors.close()
        super().stop()

    @override(Algorithm)
    def get_state(self, components: str | Collection[str] | None = None, *,
                  not_components: str | Collection[str] | None = None, **kwargs) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(COMPONENT_GEPPO, components, not_components):
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
        """Each trained module's state, the policy version and the result schema."""
        return {
            "modules": {module_id: state.get_state() for module_id, state in self.module_states.items()},
            "policy_version": self.policy_version,
            "result_keys": self._result_keys,
            "seed_root": self._seed_root,
            "env_runner_restarts": dict(self._env_runner_restarts),
        }

    def _set_geppo_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_GEPPO not in state:
            return
        geppo = state[COMPONENT_GEPPO]
        self.policy_version = geppo["policy_version"]
        # Checkpoints of 0.8 and older hold the single module's state at the top level.
        modules = geppo["modules"] if "modules" in geppo else {DEFAULT_MODULE_ID: geppo}
        for module_id, module_state in modules.items():
            if module_id in self.module_states:
                self.module_states[module_id].set_state(module_state, policy_version=self.policy_version)
        self._seed_root = geppo.get("seed_root", self._seed_root)
        self._env_runner_restarts = dict(geppo.get("env_runner_restarts", {}))
        if geppo.get("result_keys") is not None:
            self._result_keys = [tuple(path) for path in geppo["result_keys"]]
