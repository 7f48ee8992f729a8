"""Which minibatch step a learner takes for a module: chosen once, by :func:`choose_step`, and
reported in every result as ``learners/<module id>/step_path``.

Every path takes the same step (GePPO's loss, the policy's gradient clip, a finite check, Adam;
tests hold them to each other) at different costs. Fastest first:

- ``hand_aot``: the step written out by hand (:mod:`rllib_geppo.core.manual_step`), compiled
  ahead of time by AOTInductor, one C++ call per step. For GePPO's own MLP module with Box
  actions, on one CPU learner, with the policy's global-norm clip, ``hand_derived_step`` and
  ``compile_learner`` on, and a C++ compiler;
- ``hand_compiled``: the same by ``torch.compile``, where exporting it for ``hand_aot`` fails;
- ``hand_eager``: the same, eager: ``compile_learner=False``, or no C++ compiler;
- ``general_compiled``: autograd's step (the loss ``GePPOTorchLearner.minibatch_losses``,
  gradients by ``torch.func``), by ``torch.compile``: any other module or setting;
- ``general_eager``: autograd's step, eager (``loss.backward()``): as ``general_compiled``,
  with ``compile_learner=False`` or, on the CPU, no C++ compiler.

GeTRPO's and GeVMPO's minibatch steps are their critic's (:func:`choose_critic_step`): the value
network's hand-derived step (any action space) as ``hand_aot``, ``hand_compiled`` or
``hand_eager`` under the same rules, else autograd's, ``general_eager``, never compiled.

**The default** (``compile_learner="auto"``) on a CPU learner for the paper's settings is
``hand_aot``: its first :data:`~rllib_geppo.core.compiled_step.AUTO_COMPILE_AFTER_STEPS` steps
(10 updates) run as ``hand_eager``, then it compiles once (or loads the package a previous run
compiled). A compile that fails later falls back as the table says, changes ``step_path`` and
logs one line.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rllib_geppo.core.compiled_step import compiler_problem, resolve_compile
from rllib_geppo.core.manual_step import ACTIVATIONS as HAND_STEP_ACTIVATIONS
from rllib_geppo.core.networks import mlp_config
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule

logger = logging.getLogger(__name__)

#: Every step path, fastest first (the module docstring's table).
STEP_PATHS = ("hand_aot", "hand_compiled", "hand_eager", "general_compiled", "general_eager")


@dataclass(frozen=True)
class StepChoice:
    """A module's minibatch step.

    Attributes:
        path: the path chosen (one of :data:`STEP_PATHS`; ``hand_compiled`` only ever as a
            fallback of ``hand_aot``).
        compile_after: eager steps before it compiles; None: never.
        passed_over: each faster path that was not chosen, and why.
    """

    path: str
    compile_after: int | None
    passed_over: Mapping[str, str] = field(default_factory=dict)

    @property
    def hand(self) -> bool:
        """Whether the step is the hand-derived one."""
        return self.path.startswith("hand")


def choose_step(module: Any, config: Any, *, distributed: bool, device: torch.device) -> StepChoice:
    """The minibatch step a learner takes for ``module`` with ``config``'s settings, several
    learners averaging their gradients (``distributed``) or not, on ``device``."""
    hand_problem = _hand_step_problem(module, config, distributed=distributed, device=device)
    compile_after, compile_problem = _compile(config, device)
    if hand_problem is None and compile_problem is None:
        return StepChoice("hand_aot", compile_after)
    if hand_problem is None:
        return StepChoice("hand_eager", None, {"hand_aot": compile_problem})
    passed = {"hand_aot": hand_problem, "hand_eager": hand_problem}
    if compile_problem is None:
        return StepChoice("general_compiled", compile_after, passed)
    return StepChoice("general_eager", None, {**passed, "general_compiled": compile_problem})


def choose_critic_step(module: Any, config: Any, *, distributed: bool, device: torch.device) -> StepChoice:
    """The minibatch step of GeTRPO's and GeVMPO's critic (their only minibatch steps): the
    value network's hand-derived step where GePPO's could run, with any action space (the
    policy is not in it) and no gradient clip (the critic has none); else autograd's, eager."""
    hand_problem = _hand_step_problem(module, config, distributed=distributed, device=device, critic=True)
    compile_after, compile_problem = _compile(config, device)
    if hand_problem is not None:
        passed = {"hand_aot": hand_problem, "hand_eager": hand_problem}
        return StepChoice(
            "general_eager", None, {**passed, "general_compiled": "the critic's is never compiled"}
        )
    if compile_problem is not None:
        return StepChoice("hand_eager", None, {"hand_aot": compile_problem})
    return StepChoice("hand_aot", compile_after)


def _compile(config: Any, device: torch.device) -> tuple[int | None, str | None]:
    """The eager steps before a compile (None: never) and why no compile can run, or None."""
    compile_after = resolve_compile(config.compile_learner)
    if compile_after is None:
        return None, "compile_learner=False"
    return compile_after, compiler_problem() if device.type == "cpu" else None


def _hand_step_problem(
    module: Any, config: Any, *, distributed: bool, device: torch.device, critic: bool = False
) -> str | None:
    """Why ``module`` cannot take the hand-derived step (the critic's alone: ``critic``) with
    these settings, or None."""
    if not config.hand_derived_step:
        return "hand_derived_step=False"
    if type(module) is not GePPOTorchRLModule:
        return "the RLModule is not GePPO's own"
    if module.log_std is None and not critic:
        return "the actions are not a Box"
    if module.pi_encoder is not None:
        return "the observations are images (a CNN encoder)"
    activation = mlp_config(module.model_config)["fcnet_activation"]
    if activation not in HAND_STEP_ACTIVATIONS:
        return f"fcnet_activation={activation!r} is not one of {', '.join(HAND_STEP_ACTIVATIONS)}"
    if distributed:
        return "several learners average their gradients"
    if device.type != "cpu":
        return f"the learner is on {device.type}"
    if not critic and (config.grad_clip_scope != "policy" or config.grad_clip_by != "global_norm"):
        return "the gradient clip is not the policy's global norm"
    return None


def path_taken(choice: StepChoice, how: str) -> str:
    """The path a step of ``choice`` took, where its compiled step ran ``how`` ("aot",
    "compiled" or "eager": :attr:`~rllib_geppo.core.compiled_step.CompiledStep.how`)."""
    return f"{'hand' if choice.hand else 'general'}_{how}"


def log_choice(choice: StepChoice) -> None:
    """One line, once per process, where a compile asked for cannot happen: which path runs
    instead, and the fix."""
    reason = choice.passed_over.get("hand_aot" if choice.hand else "general_compiled")
    if reason is not None and reason != "compile_learner=False":
        _log_eager(choice.path, reason)


@functools.cache
def _log_eager(path: str, reason: str) -> None:
    logger.warning(
        "GePPO's minibatch steps run eagerly (step_path=%s): %s. Install one for compiled steps "
        "(on Debian or Ubuntu: apt install g++), or set compile_learner=False to silence this.",
        path,
        reason,
    )
