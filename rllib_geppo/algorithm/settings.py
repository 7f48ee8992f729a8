"""GePPO's settings as one table: each setting's default, its rule and what it means, together.

* :data:`GEPPO_SETTINGS`: GePPO's own settings, set with ``.training(...)``.
* :data:`RLLIB_SETTINGS`: RLlib's settings that GePPO sets to the paper's values (Queeney et
  al. 2021, Appendix table), or checks before Ray starts because RLlib would fail on a bad value
  only in a worker, or with a message that names neither the setting nor a fix. Their rules
  hold for any algorithm: the command line checks them for PPO too.
* :data:`UNUSED_SETTINGS`: PPO's and RLlib's training settings that GePPO does not use, each
  with GePPO's default and what to use instead; any other value is refused.

``GePPOConfig.__init__`` takes every default from here and ``GePPOConfig.validate`` every rule
(:func:`refused_settings`, which also checks what no single setting decides: the framework, the
API stack, the model config), so neither can drift from this table. docs/algorithm.md has the
same settings with their units, checked by a test.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rllib_geppo import private_ray
from rllib_geppo.core.compiled_step import COMPILE_SETTINGS
from rllib_geppo.core.gradients import CLIP_BY, CLIP_SCOPES
from rllib_geppo.core.module_state import REWARD_SCALINGS
from rllib_geppo.core.policy_weights import KINDS, TRADEOFF_RULES
from rllib_geppo.core.rules import Rule, at_least, between, count, flag, is_integer, one_of, positive
from rllib_geppo.core.schedules import is_schedule
from rllib_geppo.rl_module.torch_rl_module import (
    SEPARATE_NETWORKS,
    GePPOTorchRLModule,
    shares_layers,
    unread_model_config,
)

logger = logging.getLogger(__name__)

#: What to do with an episode chunk holding a NaN or infinite reward or observation.
NONFINITE_DATA = ("error", "drop")
#: How the clip range follows a sampling lag (docs/overlapped_sampling.md).
LAG_CLIP_RULES = ("unlagged", "bound")
#: The largest ``sample_lag``.
MAX_SAMPLE_LAG = 16


@dataclass(frozen=True)
class Setting:
    """One setting: its name, default, rule and meaning (units, the paper's symbol).

    ``rule`` is a :class:`~rllib_geppo.core.rules.Rule`, or where it depends on other
    settings (``reads``) a function of the config giving one, which runs only once those
    passed their own rules. ``hint`` is the type ``.training()`` declares (the default's type
    unless given), which the command line reads to check a YAML value's kind.
    """

    name: str
    default: Any
    rule: Rule | Callable[[Any], Rule]
    doc: str
    reads: tuple[str, ...] = ()
    hint: Any = None

    def rule_for(self, config: Any) -> Rule:
        return self.rule if isinstance(self.rule, Rule) else self.rule(config)

    @property
    def type_hint(self) -> Any:
        return self.hint if self.hint is not None else type(self.default)


def _max_policies(config) -> Rule:
    return count(config.batch_multiple).because("at least batch_multiple")


def _at_least_num_minibatches(config) -> Rule:
    return count(config.num_minibatches).because("at least num_minibatches")


def _sample_lag(config) -> Rule:
    low = int(config.uses_overlapped_sampling)
    return Rule(
        lambda value: value is None or (is_integer(value) and low <= value <= MAX_SAMPLE_LAG),
        f"None or an integer from {low} (what {'overlapped' if low else 'synchronous'} "
        f"sampling gives) to {MAX_SAMPLE_LAG}",
    )


def _is_schedule(value: Any) -> bool:
    """RLlib's schedule of a positive setting (an lr): each value a finite positive number."""
    return is_schedule(value, positive().ok)


def _layer_sizes(model_config: Any) -> bool:
    """``fcnet_hiddens`` and ``vf_fcnet_hiddens`` (None: the value network takes
    ``fcnet_hiddens``) of a mapping are lists of layer sizes."""

    def sizes(value: Any) -> bool:
        return isinstance(value, list) and all(count(1).ok(h) for h in value)

    return sizes(model_config.get("fcnet_hiddens", [])) and sizes(model_config.get("vf_fcnet_hiddens") or [])


#: Rules of RLlib's own settings that hold in every algorithm, PPO's too: RLlib rejects a bad
#: value only once Ray runs, or with a message that names neither the setting nor a fix. The
#: command line checks them for any algorithm; GePPO's table below holds GePPO to them as well.
RLLIB_RULES: dict[str, Rule] = {
    "num_env_runners": count(0, "0 samples in the driver"),
    "num_envs_per_env_runner": count(1),
    "num_learners": count(0, "0: a learner in the driver"),
    "num_epochs": count(1),
    "train_batch_size_per_learner": count(1).or_none(),
    "train_batch_size": count(1),
    "minibatch_size": count(1).or_none("derived from num_minibatches"),
    "seed": count(0).or_none(),
    "lr": Rule(
        lambda value: positive().ok(value) or _is_schedule(value),
        "a finite positive number, or a schedule [[0, lr], [timestep, lr], ...] of such numbers",
    ),
    "model_config": Rule(
        lambda value: not isinstance(value, dict) or _layer_sizes(value),
        "a mapping whose fcnet_hiddens and vf_fcnet_hiddens are lists of layer sizes (integers >= 1)",
    ),
}

_ENTROPY_COEFF = Rule(
    lambda value: at_least(0).ok(value) or is_schedule(value, at_least(0).ok),
    "a finite number >= 0, or a schedule [[0, c], [env steps, c], ...] of such numbers",
)
_POSITIVE_OR_INF = Rule(lambda value: value > 0 and not math.isnan(value), "a positive number or inf")
_NO_KL_SHORT = "the clip range and the TV-driven policy lr bound each update"

_WEIGHTS = Rule(
    lambda value: value in KINDS or not isinstance(value, str), f"one of {KINDS} or a list of weights"
)

# The tables keep each setting to a few lines, as a table reads.
# fmt: off
#: GePPO's own settings (``.training(...)``); defaults are the paper's.
GEPPO_SETTINGS: tuple[Setting, ...] = (
    Setting("batch_multiple", 2, count(1),
            "B, PPO's batch in units of n (N = B*n); sets how far the weights may reach back."),
    Setting("max_policies", 20, _max_policies,
            "M_max, the most batch ages the weight programs may use (the optimal weights use 4 "
            "with B = 2).", reads=("batch_multiple",)),
    Setting("policy_weights", "optimal", _WEIGHTS,
            '"optimal" (the paper\'s convex programs, Theorems 4-5), "uniform" (Theorems 2-3), or '
            "an explicit list nu (index = age, 0 = the current policy; sums to 1).",
            hint=str | list[float]),
    Setting("weights_tradeoff", 1.0, between(0, 1),
            "In [0, 1]: 1 maximises the effective sample size (Theorem 5), 0 the TV change per "
            "sample (Theorem 4)."),
    Setting("weights_tradeoff_rule", "scalarized", one_of(TRADEOFF_RULES),
            'How a tradeoff strictly between 0 and 1 is met: "scalarized" solves one program '
            "weighing ESS against TV, each scaled by its range (the authors' later code); "
            '"mixed" averages the two extreme solutions (the NeurIPS release; 0.5 is its "mix").'),
    Setting("vtrace_clip", 1.0, positive(), "c_bar, the truncation of the V-trace ratios pi_k/mu."),
    Setting("vf_lr", 3e-4, positive(), "The value function's Adam step size (fixed)."),
    Setting("num_minibatches", 32, count(1), "Minibatches per epoch over the whole store."),
    Setting("adaptive_lr", True, flag(),
            "Algorithm 1's lr rule: adapt the policy lr from the TV estimate; False keeps `lr`."),
    Setting("lr_adapt_factor", 0.03, at_least(0),
            "alpha: the lr is divided by 1 + alpha when TV > eps/2, multiplied by it when "
            "TV < beta * eps/2."),
    Setting("lr_adapt_min_ratio", 0.5, between(0, 1),
            "beta, as a fraction of eps/2; 0: the lr only falls."),
    Setting("init_std_multiple", 1.0, positive(),
            "The initial policy std in half action ranges (Box actions; the paper: 0.5 on Ant "
            "and Humanoid)."),
    Setting("sample_reuse", True, flag(),
            "False: M = 1, B*n new samples per iteration, eps_PPO, plain GAE; with "
            "`adaptive_lr=False` the paper's PPO baseline, with `adaptive_lr=True` (the "
            "default) its PPO-Adapt."),
    Setting("overlap_sampling", "auto", one_of((True, False, "auto")),
            "The EnvRunners sample the next batch while the learners update, so the youngest "
            'stored batch is one iteration old at every update. "auto": on with sample reuse, '
            "at least one EnvRunner and the new API stack (docs/overlapped_sampling.md).", hint=bool | str),
    Setting("lag_clip_rule", "unlagged", one_of(LAG_CLIP_RULES),
            'The clip range under a sampling lag: "unlagged" takes Lemma 4\'s eps_PPO / '
            'E_nu[i + 1] from the unlagged weights; "bound" applies Lemma 4 to the lagged ones, '
            "eps_PPO / (E_nu[i + 1] + lag), and learned less per sample."),
    Setting("adam_eps", 1e-8, positive(), "Epsilon of both Adam optimizers (torch's; SB3 uses 1e-5)."),
    Setting("grad_clip_scope", "policy", one_of(CLIP_SCOPES),
            'What `grad_clip` clips: "policy" (the paper\'s; the value function is never '
            'clipped) or "all" (one norm over policy and value, as SB3).'),
    Setting("reward_scaling", "running_return", one_of(REWARD_SCALINGS),
            'The return whose std scales rewards: "running_return" (SB3\'s VecNormalize: '
            "discounted sums of past rewards carried across an episode's chunks) or "
            '"returns_to_go" (the authors\' code: within each collected chunk).'),
    Setting("obs_stats_warm_start", False, flag(),
            "Install the first batch's observation statistics before the first update, which "
            "otherwise sees raw observations."),
    Setting("nonfinite_data", "error", one_of(NONFINITE_DATA),
            'What an episode chunk with a NaN or infinite reward or observation does: "error" '
            "stops training with a message naming the environment, column, env step and "
            'episode; "drop" drops the chunk, logs it and counts it in `num_dropped_segments`.'),
    Setting("compile_learner", "auto", one_of(COMPILE_SETTINGS),
            "torch.compile each minibatch's forward pass, loss, gradients, clip and finite "
            'check, once per learner process (the Adam step stays eager). "auto": after each '
            "learner's first 3,200 gradient steps, so short runs never compile. New API stack.",
            hint=bool | str),
    Setting("hand_derived_step", True, flag(),
            "GePPO's own MLP modules with Box actions take each minibatch step with its backward "
            "pass derived by hand (one flat gradient and Adam per network), eager or compiled as "
            "`compile_learner` says; False: autograd, as every other module does. One CPU "
            "learner, the policy's global-norm clip; new API stack."),
    Setting("stagger_starts", False, flag(),
            "Cut the first episode of training env g of G after L - round(L * g / G) steps (L "
            "the time limit), so that envs whose episodes all last L steps go out of phase. "
            "New API stack, single-agent, SYNC vectorisation."),
    Setting("train_batch_size_per_env_runner", None, lambda c: _at_least_num_minibatches(c).or_none(),
            "The scale rule for adding samplers, in env steps: each EnvRunner (or the driver) "
            "collects this many new steps per iteration, n = this x max(1, `num_env_runners`). "
            "None: n is `train_batch_size_per_learner` x learners.",
            reads=("num_minibatches",), hint=int | None),
    Setting("max_failed_samples_in_a_row", 3, count(1),
            "Samples in a row that may fail with no env step (RLlib restarting the EnvRunners in "
            "between) before training stops with the environment's error."),
    Setting("sample_lag", None, _sample_lag,
            "The age, in updates, of the youngest stored batch at every update: the EnvRunners "
            "act with a policy held back that far (a research setting). None: what sampling "
            "gives, 0 synchronous, 1 overlapped.",
            reads=("num_env_runners", "overlap_sampling", "sample_reuse"), hint=int | None),
    Setting("early_stop", False, flag(),
            "End an update's epochs once the TV over every stored sample exceeds eps/2 (the "
            "authors' option, off as theirs). GeTRPO and GeVMPO take one policy step, whose "
            "line search bounds its KL: there it ends nothing."),
    Setting("cg_iterations", 20, count(1),
            "GeTRPO and GeVMPO: conjugate-gradient iterations of the natural-gradient step."),
    Setting("cg_damping", 0.01, positive(),
            "GeTRPO and GeVMPO: damping added to the Fisher-vector products (F + damping I)."),
    Setting("kl_max_factor", 1.5, at_least(1),
            "GeTRPO and GeVMPO: the line search accepts a step whose weighted mean KL(pi_k || pi) "
            "is at most this times delta = eps^2 / 2."),
    Setting("max_backtracks", 10, count(1),
            "GeTRPO and GeVMPO: step sizes the line search tries, each 1/sqrt(2) of the one "
            "before; where none is accepted the policy stays pi_k."),
)

#: The settings of the natural-gradient step, which GePPO's clipped update does not take.
NATURAL_GRADIENT_SETTINGS = ("cg_iterations", "cg_damping", "kl_max_factor", "max_backtracks")
#: The settings of GePPO's clipped minibatch steps of the policy, which GeTRPO's and GeVMPO's one
#: natural-gradient step does not take (their critic's steps have no clip either).
CLIPPED_STEP_SETTINGS = (
    "lr",
    "lr_adapt_factor",
    "lr_adapt_min_ratio",
    "entropy_coeff",
    "grad_clip",
    "grad_clip_by",
    "grad_clip_scope",
)

#: RLlib's settings, with GePPO's defaults (the paper's) and rules that hold for any algorithm.
RLLIB_SETTINGS: tuple[Setting, ...] = (
    Setting("lr", 3e-4, RLLIB_RULES["lr"],
            "eta, the initial policy lr (Adam step size), adapted every iteration; or, with "
            "`adaptive_lr=False`, RLlib's schedule [[0, lr], [env steps, lr], ...]."),
    Setting("gamma", 0.995, between(0, 1, low_open=True), "The discount."),
    Setting("lambda_", 0.97, between(0, 1), "GAE lambda."),
    Setting("clip_param", 0.2, between(0, 1, low_open=True, high_open=True),
            "eps_PPO; GePPO clips at eps_PPO / E_nu[i + 1] (0.1 by default) around pi_k/mu."),
    Setting("num_epochs", 10, RLLIB_RULES["num_epochs"], "Passes over the whole store per update."),
    Setting("minibatch_size", None, RLLIB_RULES["minibatch_size"],
            "If set, overrides `num_minibatches`: samples in each learner's slice of a minibatch."),
    Setting("train_batch_size_per_learner", 1024, _at_least_num_minibatches,
            "n, new env steps per iteration (and learner).", reads=("num_minibatches",)),
    Setting("grad_clip", 0.5, positive().or_none("no clip"),
            "The policy's gradient-norm clip; the value function is never clipped."),
    Setting("grad_clip_by", "global_norm", one_of(CLIP_BY), "How `grad_clip` clips (RLlib's)."),
    Setting("entropy_coeff", 0.0, _ENTROPY_COEFF,
            "Subtracts this times the weighted mean entropy (nats) from each minibatch's policy loss "
            "(RLlib's schedules too)."),
    Setting("num_env_runners", 1, RLLIB_RULES["num_env_runners"], "EnvRunner processes."),
    Setting("num_envs_per_env_runner", 2, RLLIB_RULES["num_envs_per_env_runner"],
            "Envs stepped together on each EnvRunner (1 is the paper's single env)."),
    Setting("num_learners", 0, RLLIB_RULES["num_learners"], "Learner processes."),
    Setting("seed", None, RLLIB_RULES["seed"], "The trial's seed; None draws one."),
    Setting("train_batch_size", 4000, RLLIB_RULES["train_batch_size"],
            "Read, as in RLlib, only where `train_batch_size_per_learner` is None, which setting "
            "`train_batch_size` alone makes it: n is then this / learners."),
    Setting("vf_clip_param", math.inf, _POSITIVE_OR_INF,
            "PPO's clip of each sample's squared value error, in squared (scaled-reward) return "
            "units; inf: no clip (PPO's default is 10)."),
    Setting("vf_loss_coeff", 1.0, at_least(0),
            "Not read: the value function has its own Adam optimizer, whose steps a constant scale "
            "of its loss leaves alone (up to `adam_eps`); `vf_lr` sets its step size."),
    Setting("kl_coeff", 0.0, at_least(0),
            "Not read (as in PPO with `use_kl_loss=False`, which GePPO keeps): " + _NO_KL_SHORT + "."),
    Setting("kl_target", 0.01, at_least(0),
            "Not read: GePPO's target is a TV change of eps/2 per update, set by `clip_param`."),
)
# fmt: on

_NO_KL = (
    "GePPO has no KL penalty: the clip range (`clip_param`) and the TV-driven policy lr "
    "(`adaptive_lr`, `lr_adapt_factor`, `lr_adapt_min_ratio`) bound each update"
)
_NO_LEARNER_CONNECTOR = (
    "GePPO's learner computes its inputs (V-trace advantages over the whole store) itself and runs "
    "no learner connector; transform observations with an env-to-module connector "
    "(.env_runners(env_to_module_connector=...))"
)

# fmt: off
#: PPO's and RLlib's training settings that GePPO does not use: name -> (GePPO's default, what to
#: use instead). validate() refuses any other value, before Ray starts (docs/algorithm.md).
UNUSED_SETTINGS: dict[str, tuple[object, str]] = {
    "use_kl_loss": (False, _NO_KL),
    "use_critic": (True, "GePPO always learns a value function (V-trace needs it)"),
    "use_gae": (True, "GePPO's advantages are always V-trace GAE; `lambda_` and `vtrace_clip` "
                      "set them (`lambda_=1.0`: Monte Carlo-like returns)"),
    "entropy_coeff_schedule": (None, "RLlib's old name: write the schedule as `entropy_coeff`"),
    "lr_schedule": (None, "RLlib's old name: write the schedule as `lr` (with `adaptive_lr=False`)"),
    "optimizer": ({}, "GePPO uses Adam for the policy and the value function; `lr`, `vf_lr` and "
                      "`adam_eps` set them"),
    "add_default_connectors_to_learner_pipeline": (True, _NO_LEARNER_CONNECTOR),
}
# fmt: on

#: RLlib's settings that only GePPO's new API stack takes with these values.
NEW_STACK_ONLY = {
    "overlap_sampling": True,
    "grad_clip_scope": "all",
    "compile_learner": True,
    "stagger_starts": True,
}


#: The names of GePPO's own settings, which ``GePPOConfig.training`` takes.
GEPPO_NAMES = frozenset(setting.name for setting in GEPPO_SETTINGS)
#: Every setting's default, GePPO's and RLlib's.
DEFAULTS = {setting.name: setting.default for setting in GEPPO_SETTINGS + RLLIB_SETTINGS}


def training_signature(rllib_training: Callable) -> inspect.Signature:
    """``GePPOConfig.training``'s signature: RLlib's keywords, then GePPO's own with their
    defaults (what help() and editors show; the method itself takes ``**kwargs``)."""
    rllib = inspect.signature(rllib_training)
    params = [p for p in rllib.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    own = [
        inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=s.default, annotation=s.type_hint)
        for s in GEPPO_SETTINGS
    ]
    return rllib.replace(parameters=[*params, *own], return_annotation="GePPOConfig")


def training_annotations() -> dict[str, Any]:
    """The types ``GePPOConfig.training`` declares for GePPO's own settings."""
    return {setting.name: setting.type_hint for setting in GEPPO_SETTINGS}


def training_docstring() -> str:
    """The Args section of ``GePPOConfig.training``, from :data:`GEPPO_SETTINGS`."""
    lines = ["Args:"]
    for setting in GEPPO_SETTINGS:
        lines.append(f"    {setting.name}: {setting.doc} Default {setting.default!r}.")
    return "\n".join(lines)


# -- The checks of a whole config ---------------------------------------------------------------


def refused_settings(config: Any) -> list[str]:
    """Every setting of a ``GePPOConfig`` that GePPO cannot run with, one message each, naming
    the setting and the fix (empty: none); ``GePPOConfig.validate()`` raises them together."""
    problems = []
    if config.framework_str != "torch":
        problems.append(
            f"GePPO is implemented in torch; got framework={config.framework_str!r}. "
            "Fix: .framework('torch')."
        )
    if config.is_multi_agent and not config.enable_env_runner_and_connector_v2:
        problems.append(
            "GePPO trains multi-agent configs on RLlib's new API stack only. Fix: "
            "remove .api_stack(...), or the .multi_agent(...) settings."
        )
    if config.model_config.get("use_lstm") or config.model_config.get("use_attention"):
        problems.append(
            "GePPO trains feed-forward models only (use_lstm / use_attention): it re-evaluates "
            "every stored sample under the current policy one sample at a time, without the "
            "recurrent state and sequence that sample was collected with. Fix: leave "
            "use_lstm off and stack recent observations in the environment instead "
            "(rllib_geppo.StackFrames, docs/your_environment.md)."
        )
    problems += table_problems(config)
    if config.normalize_actions and builds_geppo_module(config):
        problems.append(
            "`normalize_actions=True` would rescale the actions of GePPO's RLModule a second "
            "time: the module already maps them to the environment's units with the action "
            "bounds it holds. Fix: leave normalize_actions unset (on for your own RLModule, as in "
            "PPO; off for GePPO's) or set it to False; clip_actions=True keeps the actions within "
            "the bounds."
        )
    for where, model_config in geppo_model_configs(config).items():
        problems += [f"{where}{problem}" for problem in unread_model_config(model_config)]
    return problems + unused_setting_problems(config)


def table_problems(config: Any) -> list[str]:
    """The rules of :data:`GEPPO_SETTINGS` and :data:`RLLIB_SETTINGS`, then the rules over
    several settings. A rule that reads other settings runs once those passed theirs."""
    problems, failed = [], set()
    for setting in sorted((*GEPPO_SETTINGS, *RLLIB_SETTINGS), key=lambda s: bool(s.reads)):
        if failed.intersection(setting.reads):
            continue
        problem = setting.rule_for(config).problem(setting.name, getattr(config, setting.name))
        if problem:
            failed.add(setting.name)
            problems.append(problem)
    return problems + combination_problems(config, failed)


def combination_problems(config: Any, failed: set[str]) -> list[str]:
    """Rules over several settings, for the settings that passed their own (``failed``: not)."""
    problems = []
    nu = None
    if not failed & {
        "batch_multiple",
        "max_policies",
        "policy_weights",
        "weights_tradeoff",
        "weights_tradeoff_rule",
    }:  # nu is solved from these
        try:
            nu = config.nu
        except ValueError as err:
            problems.append(f"`policy_weights`: {err}")
    if (
        nu is not None
        and config.minibatch_size is not None
        and not failed
        & {
            "minibatch_size",
            "num_learners",
            "train_batch_size_per_learner",
            "train_batch_size_per_env_runner",
        }
    ):
        stored = len(nu) * config.samples_per_iteration // max(1, config.num_learners)
        if config.minibatch_size > stored:
            over = f" over {config.num_learners} learners" if config.num_learners > 1 else ""
            problems.append(
                f"`minibatch_size` must be None or at most the samples each learner holds in the "
                f"full store ({stored}: {len(nu)} batches of {config.samples_per_iteration} new "
                f"samples{over}), from which GePPO draws its minibatches; got "
                f"{config.minibatch_size!r}."
            )
    if not config.enable_env_runner_and_connector_v2:
        for setting, value in NEW_STACK_ONLY.items():
            if getattr(config, setting) == value:  # "auto" samples synchronously there
                problems.append(
                    f"`{setting}={value!r}` runs on the new API stack only; leave it "
                    "at its default on the old API stack."
                )
    if not failed & {"lr", "adaptive_lr"} and isinstance(config.lr, list) and config.adaptive_lr:
        problems.append(
            "`lr` is a schedule, but `adaptive_lr=True` sets the policy lr from each update's TV "
            "(Algorithm 1). Fix: .training(adaptive_lr=False) to follow the schedule, or a "
            "constant `lr`, the lr rule's starting value."
        )
    if config.natural_gradient:
        problems += natural_gradient_problems(config, failed)
    else:
        problems += [
            f"`{setting}={getattr(config, setting)!r}` sets GeTRPO's and GeVMPO's natural-gradient "
            f"step; GePPO takes clipped minibatch steps. Fix: leave it at {DEFAULTS[setting]!r}, "
            "or use GeTRPOConfig or GeVMPOConfig."
            for setting in _changed(config, NATURAL_GRADIENT_SETTINGS, failed)
        ]
    if config.is_multi_agent and config.stagger_starts:
        problems.append(
            "`stagger_starts=True` runs with single-agent environments only; leave "
            "it at False with .multi_agent(...)."
        )
    return problems


def natural_gradient_problems(config: Any, failed: set[str]) -> list[str]:
    """What GeTRPO and GeVMPO cannot run with: their policy takes one natural-gradient step per
    update, with no optimizer of its own, so GePPO's settings of its clipped steps are refused
    away from their defaults (``failed``: those already refused by their own rule)."""
    name = config.algo_class.__name__
    problems = [
        f"`{setting}={getattr(config, setting)!r}` sets GePPO's clipped minibatch steps of the "
        f"policy; {name}'s policy takes one natural-gradient step, sized by delta = eps^2 / 2 "
        "(`clip_param` sets eps), with no lr, entropy bonus or gradient clip; its critic takes "
        f"Adam steps of `vf_lr`, unclipped. Fix: leave it at {DEFAULTS[setting]!r}."
        for setting in _changed(config, CLIPPED_STEP_SETTINGS, failed)
    ]
    if config.adaptive_lr:
        problems.append(
            f"`adaptive_lr=True` adapts the lr of GePPO's policy optimizer; {name}'s policy takes "
            "one natural-gradient step, its size set by delta = eps^2 / 2. Fix: "
            ".training(adaptive_lr=False)."
        )
    if config.num_learners > 1:
        problems.append(
            f"`num_learners={config.num_learners}`: {name} runs on one learner. Fix: "
            ".learners(num_learners=1) (or 0: the learner in the driver)."
        )
    if not config.enable_rl_module_and_learner:
        problems.append(f"{name} runs on the new API stack only. Fix: leave .api_stack(...) at its defaults.")
    return problems


def unused_setting_problems(config: Any) -> list[str]:
    """Any value but GePPO's default of a setting in :data:`UNUSED_SETTINGS`."""
    problems = []
    for setting, (default, instead) in UNUSED_SETTINGS.items():
        value = getattr(config, setting)
        if not _same(value, default):
            problems.append(_unused(setting, value, default, instead))
    if (connector := private_ray.learner_connector(config)) is not None:
        problems.append(_unused("learner_connector", connector, None, _NO_LEARNER_CONNECTOR))
    return problems


def _unused(name: str, value: Any, default: Any, instead: str) -> str:
    return f"`{name}={value!r}`: GePPO does not use `{name}` (leave it at {default!r}): {instead}."


def normalizes_actions(config: Any) -> bool:
    """Whether RLlib's module-to-env pipeline maps the module's Box actions from [-1, 1] to the
    bounds (``normalize_actions``): as set, or where left unset (None, GePPO's default) as in
    RLlib's PPO (True) for a user's RLModule, which expects it, and never where GePPO's own
    module acts, which maps its actions to the bounds itself (one setting serves every module
    of a config). ``GePPOConfig.validate`` sets an unset value to this."""
    if config.normalize_actions is not None:
        return bool(config.normalize_actions)
    return not builds_geppo_module(config)


def builds_geppo_module(config: Any) -> bool:
    """Whether any module the config builds is GePPO's own RLModule."""
    return any(map(is_geppo_module, module_specs(config).values()))


def geppo_model_configs(config: Any) -> dict[str, Any]:
    """The model configs that GePPO's own RLModule is built with, by where they are set
    ("" for ``.rl_module(model_config=...)``); a user's RLModule reads its own."""
    specs = module_specs(config)
    configs = {"": private_ray.user_model_config(config)} if builds_geppo_module(config) else {}
    for module_id, module_spec in specs.items():
        if is_geppo_module(module_spec) and getattr(module_spec, "model_config", None):
            where = f"module {module_id!r}: " if module_id is not None else "rl_module_spec: "
            configs[where] = module_spec.model_config
    return configs


def geppo_modules_only(config: Any) -> bool:
    """Whether every module the config builds is GePPO's own RLModule, which normalises its
    observations itself."""
    return all(map(is_geppo_module, module_specs(config).values()))


def module_specs(config: Any) -> dict[Any, Any]:
    """The module specs the config sets, by module ID (None: the single-agent spec, or no
    spec: the default module)."""
    spec = private_ray.user_rl_module_spec(config)
    specs = getattr(spec, "rl_module_specs", spec)
    return specs if isinstance(specs, dict) else {None: specs}


def is_geppo_module(module_spec: Any) -> bool:
    """Whether ``module_spec`` (or its absence) builds GePPO's own RLModule."""
    return getattr(module_spec, "module_class", None) in (None, GePPOTorchRLModule)


def _changed(config: Any, settings: Sequence[str], failed: set[str]) -> list[str]:
    """Those of ``settings`` that ``config`` sets away from their defaults, less those already
    refused by their own rule (``failed``)."""
    return [s for s in settings if s not in failed and not _same(getattr(config, s), DEFAULTS[s])]


def _same(value, default) -> bool:
    """``value == default``, False where comparing fails or gives no single bool (arrays)."""
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


def without_rllib_advice(message: str) -> str:
    """RLlib's refusal without its closing advice to switch validation off (the fix is to
    change the value)."""
    return message.split("\nTo suppress all validation errors")[0]


def warn_on_biased_evaluation(config: Any) -> None:
    """RLlib ends an evaluation of N episodes when the first N end across its envs, which keeps
    the shortest where episodes can end early (a Hopper that falls): a biased return."""
    if not config.evaluation_interval or config.evaluation_duration_unit != "episodes":
        return
    evaluation = config.get_evaluation_config_object()  # None for an evaluation config itself
    num_envs = evaluation.num_envs_per_env_runner if evaluation is not None else 1
    if num_envs > 1:
        _warn_once(
            f"Evaluation by episodes on {num_envs} envs per EnvRunner keeps the episodes that "
            "end first, the shortest where episodes can end early, so its return is biased. "
            "Fix: .evaluation(evaluation_config={'num_envs_per_env_runner': 1})."
        )


#: Logged where the old API stack's default model takes the place of RLlib's MeanStdFilter.
OLD_STACK_FILTER_LEFT_OUT = (
    "observation_filter='MeanStdFilter' is left out: GePPO's default model normalises "
    "observations itself, with running statistics that stay right under sample reuse and are "
    "saved with its weights (a custom ModelV2 keeps the filter)."
)


def leaves_out_old_stack_filter(config: Any) -> bool:
    """Whether the old API stack's default model takes the place of RLlib's MeanStdFilter
    (a custom ModelV2, which keeps no statistics, runs with the filter)."""
    return (
        not config.enable_env_runner_and_connector_v2
        and not config.model.get("custom_model")
        and config.observation_filter == "MeanStdFilter"
    )


def warn_on_shared_layers(config: Any) -> None:
    """GePPO's module keeps the policy and value networks separate: say so where a model
    config asks for shared layers, RLlib's ``DefaultModelConfig`` by default."""
    if any(map(shares_layers, geppo_model_configs(config).values())):
        _warn_once(SEPARATE_NETWORKS)


@functools.cache
def _warn_once(message: str) -> None:
    """Log ``message`` once per process: RLlib validates copies of a config again and again."""
    logger.warning(message)
