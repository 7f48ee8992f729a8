"""GePPO's minibatch step for its own MLP module, written out by hand.

One step of the paper's networks (a Gaussian policy MLP with a state-independent log-std and a
value MLP, both on normalised observations) is a handful of small matrix products. Autograd,
the optimizer's bookkeeping and one tensor per parameter add more time than the arithmetic.
:class:`ManualStep` does the same step with nothing else:

- the forward pass, keeping what the backward pass reads;
- the backward pass derived by hand (below), into one flat gradient per network;
- the policy's global-norm clip and the finite check;
- one Adam step per network on flat buffers, skipped where the step is not finite.

The math is that of ``objective.geppo_losses``, ``gradients.clip_and_check`` with
``scope="policy"`` and ``clip_by="global_norm"``, and torch's Adam, on the module's parameters
laid end to end (``tests/learner/test_manual_step.py`` holds it to the general step). The step
is one pure function of tensors (:func:`pure_step`), which ``torch.compile`` compiles whole,
Adam included, with nothing aliased. The value network's part alone (:func:`pure_value_step`,
:class:`ManualValueStep`) is GeTRPO's and GeVMPO's critic step. Pure torch; no Ray.

The backward pass. With u = (a_n - mu) / sigma (a_n: the action in normalised units, sigma =
exp(max(log_std, log MIN_STD))), log pi(a|s) = sum_j(-u_j^2 / 2 - log sigma_j) + const, so
d log pi / d mu_j = u_j / sigma_j and d log pi / d log sigma_j = u_j^2 - 1. The clipped
surrogate mean(w * max(-rho A, -clip(rho, c - eps, c + eps) A)), rho = exp(log pi - log mu),
has d/d rho_i = -w_i A_i / B times 1 where the unclipped term is the larger, 1[c - eps <= rho_i
<= c + eps] where the clipped one is, and the mean of the two on a tie (as torch.maximum's
gradient), and d/d log pi_i = rho_i times that. The entropy bonus -coeff * mean(w * H) has
d/d log sigma_j = -coeff * mean(w). The value loss 0.5 * mean(w * min((t - V)^2, clip)) has
d/dV_i = -w_i (t_i - V_i) / B where (t_i - V_i)^2 <= clip, else 0. The MLPs' layers then
backpropagate as every MLP does.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rllib_geppo.core.adam import adam_state
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.compiled_step import CompiledStep

Tensor = torch.Tensor

#: The activations, and their derivatives as functions of their output h = act(z).
ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "linear": lambda z: z}
_DERIVATIVES = {
    "tanh": lambda h: 1.0 - h * h,
    "relu": lambda h: (h > 0).to(h.dtype),
    "linear": lambda h: torch.ones_like(h),
}
ADAM_BETAS = (0.9, 0.999)
#: The minibatch columns the step reads, in the order :meth:`ManualStep.step` passes them.
STEP_COLUMNS = (C.OBS, C.ACTIONS, C.BEHAVIOUR_LOGP, C.CENTER, C.ADVANTAGES, C.VALUE_TARGETS, C.SAMPLE_WEIGHTS)
#: The columns the value network's step alone reads (:class:`ManualValueStep`).
VALUE_STEP_COLUMNS = (C.OBS, C.VALUE_TARGETS, C.SAMPLE_WEIGHTS)
#: This file's hash: a compiled step cached ahead of time is this code's.
_SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class Layout:
    """Where each parameter of a network sits in its flat buffer: the MLP's weights and biases
    in order, then any others (the policy's log-std)."""

    shapes: tuple[torch.Size, ...]

    @property
    def sizes(self) -> list[int]:
        return [math.prod(shape) for shape in self.shapes]

    def unflatten(self, flat: Tensor) -> list[Tensor]:
        return [part.view(shape) for part, shape in zip(torch.split(flat, self.sizes), self.shapes)]


def mlp_layers(params: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """The (weight, bias) pairs of a network's parameters (:meth:`Layout.unflatten`), without
    the odd one at the end (the policy's log-std)."""
    count = 2 * (len(params) // 2)
    return list(zip(params[0:count:2], params[1:count:2]))


@dataclass(frozen=True)
class Settings:
    """What the step reads that does not change between updates."""

    activation: str
    obs_clip: float
    min_log_std: float
    grad_clip: float | None
    entropy_bonus: bool
    vf_clip_param: float
    adam_eps: float


def pure_step(
    settings: Settings,
    layouts: tuple[Layout, Layout],
    flats: tuple[Tensor, Tensor],
    adam: tuple[Tensor, ...],
    constants: tuple[Tensor, ...],
    minibatch: dict[str, Tensor],
    clip_eps: Tensor,
    take: Tensor,
) -> tuple:
    """One step, as a function: ``flats`` the policy's and the value network's parameters,
    ``adam`` their moments and step counts (pi_m, pi_v, pi_t, vf_m, vf_v, vf_t), ``constants``
    the observation statistics, action units, lrs and entropy coefficient. Returns ``(stats,
    finite, new flats, new adam)``: stats as the learner's minibatch_step gives them."""
    pi_layout, vf_layout = layouts
    pi_flat, vf_flat = flats
    obs_mean, obs_std, center, half_range, pi_lr, vf_lr, entropy_coeff = constants
    x = torch.clamp((minibatch[C.OBS] - obs_mean) / obs_std, -settings.obs_clip, settings.obs_clip)
    policy_loss, pi_grad = _policy(
        settings, pi_layout, pi_flat, x, minibatch, center, half_range, clip_eps, entropy_coeff
    )
    value_loss, vf_grad = _value(
        settings, vf_layout, vf_flat, x, minibatch[C.VALUE_TARGETS], minibatch[C.SAMPLE_WEIGHTS]
    )
    norm = torch.linalg.vector_norm(pi_grad)
    if settings.grad_clip:
        pi_grad = pi_grad * torch.clamp(settings.grad_clip / (norm + 1e-6), max=1.0)
    stats = torch.stack([policy_loss, value_loss, norm])
    finite = torch.isfinite(stats.sum() + torch.linalg.vector_norm(vf_grad))
    go = finite & take
    pi_new = _adam(pi_flat, *adam[0:3], pi_grad, pi_lr, go, settings.adam_eps)
    vf_new = _adam(vf_flat, *adam[3:6], vf_grad, vf_lr, go, settings.adam_eps)
    return stats, finite, (pi_new[0], vf_new[0]), (*pi_new[1:], *vf_new[1:])


def pure_value_step(
    settings: Settings,
    layout: Layout,
    flat: Tensor,
    adam: tuple[Tensor, ...],
    constants: tuple[Tensor, ...],
    minibatch: dict[str, Tensor],
    take: Tensor,
) -> tuple:
    """One step of the value network alone (GeTRPO's and GeVMPO's critic), as a function:
    ``flat`` its parameters, ``adam`` their moments and step count, ``constants`` the
    observation statistics and the value lr. Returns ``(loss, finite, new flat, new adam)``."""
    obs_mean, obs_std, vf_lr = constants
    x = torch.clamp((minibatch[C.OBS] - obs_mean) / obs_std, -settings.obs_clip, settings.obs_clip)
    loss, grad = _value(settings, layout, flat, x, minibatch[C.VALUE_TARGETS], minibatch[C.SAMPLE_WEIGHTS])
    finite = torch.isfinite(loss + torch.linalg.vector_norm(grad))
    new = _adam(flat, *adam, grad, vf_lr, finite & take, settings.adam_eps)
    return loss, finite, new[0], new[1:]


def _policy(settings, layout, flat, x, minibatch, center_a, half_range, clip_eps, entropy_coeff):
    """The policy loss and its flat gradient."""
    weights, advantages, center = minibatch[C.SAMPLE_WEIGHTS], minibatch[C.ADVANTAGES], minibatch[C.CENTER]
    params = layout.unflatten(flat)
    layers, raw_log_std = mlp_layers(params), params[-1]
    inputs = _forward(settings, layers, x)
    mu = inputs[-1]
    log_std = torch.clamp(raw_log_std, min=settings.min_log_std)
    inv_std = torch.exp(-log_std)
    u = ((minibatch[C.ACTIONS] - center_a) / half_range - mu) * inv_std
    log_norm = torch.log(half_range).sum() + 0.5 * math.log(2 * math.pi) * mu.shape[-1]
    logp = (-0.5 * u * u - log_std).sum(-1) - log_norm
    rho = torch.exp(logp - minibatch[C.BEHAVIOUR_LOGP])
    low, high = center - clip_eps, center + clip_eps
    unclipped, clipped = -rho * advantages, -torch.clamp(rho, low, high) * advantages
    loss = torch.mean(weights * torch.maximum(unclipped, clipped))
    # d loss / d rho: which term the max took (a tie takes the mean of both, as torch's).
    in_range = ((rho >= low) & (rho <= high)).to(x.dtype)
    share = torch.where(
        unclipped > clipped, 1.0, torch.where(unclipped < clipped, in_range, 0.5 + 0.5 * in_range)
    )
    dlogp = -(weights / x.shape[0]) * advantages * share * rho
    dlog_std = (dlogp[:, None] * (u * u - 1.0)).sum(0)
    if settings.entropy_bonus:  # H = sum(log_std) + const per sample, weighted by w
        entropy = (log_std + torch.log(half_range) + 0.5 + 0.5 * math.log(2 * math.pi)).sum()
        loss = loss - entropy_coeff * torch.mean(weights) * entropy
        dlog_std = dlog_std - entropy_coeff * torch.mean(weights)
    grads = _backward(settings, layers, inputs, dlogp[:, None] * u * inv_std)
    return loss, torch.cat([*grads, dlog_std * (raw_log_std >= settings.min_log_std)])


def _value(settings, layout, flat, x, value_targets, weights):
    """The value loss and its flat gradient."""
    layers = mlp_layers(layout.unflatten(flat))
    inputs = _forward(settings, layers, x)
    error = value_targets - inputs[-1][:, 0]
    squared = error * error
    dv = -(weights / x.shape[0]) * error
    if math.isfinite(settings.vf_clip_param):
        dv = dv * (squared <= settings.vf_clip_param)
        squared = torch.clamp(squared, max=settings.vf_clip_param)
    grads = _backward(settings, layers, inputs, dv[:, None])
    return 0.5 * torch.mean(weights * squared), torch.cat(grads)


def _forward(settings, layers, x) -> list[Tensor]:
    """Each layer's input, then the last layer's output (no activation on it)."""
    act, inputs = ACTIVATIONS[settings.activation], [x]
    for i, (weight, bias) in enumerate(layers):
        z = torch.addmm(bias, inputs[-1], weight.t())
        inputs.append(z if i == len(layers) - 1 else act(z))
    return inputs


def _backward(settings, layers, inputs: list[Tensor], grad_out: Tensor) -> list[Tensor]:
    """Backpropagate ``grad_out`` (d loss / d output) through ``layers``: each weight's and
    bias's gradient, flattened, in layer order."""
    derivative, grads = _DERIVATIVES[settings.activation], []
    for i in reversed(range(len(layers))):
        grads[:0] = [(grad_out.t() @ inputs[i]).reshape(-1), grad_out.sum(0)]
        if i:
            grad_out = (grad_out @ layers[i][0]) * derivative(inputs[i])
    return grads


def _adam(flat, exp_avg, exp_avg_sq, count, grad, lr, go, eps):
    """torch's Adam (no weight decay, no amsgrad), the step taken where ``go`` holds. The step
    count is float64: 1 - 0.999^t in float32 is off by 1e-5 relative in the first steps."""
    beta1, beta2 = ADAM_BETAS
    count = count + go.to(count.dtype)
    new_avg = torch.lerp(exp_avg, grad, 1 - beta1)
    new_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
    bias1, bias2_sqrt = 1 - beta1**count, torch.sqrt(1 - beta2**count)
    update = new_avg / (torch.sqrt(new_avg_sq) / bias2_sqrt + eps) * (-lr / bias1)
    return (
        torch.where(go, flat + update, flat),
        torch.where(go, new_avg, exp_avg),
        torch.where(go, new_avg_sq, exp_avg_sq),
        count,
    )


def _linear_params(mlp: nn.Sequential) -> list[Tensor]:
    return [p for m in mlp if isinstance(m, nn.Linear) for p in (m.weight, m.bias)]


class _HandStep:
    """What both hand-derived steps share: flat copies of their networks' weights and Adam
    state, taken in from the module and its optimizer by :meth:`_begin` before an update's
    steps and written back by :meth:`end` after, so that the module, its optimizer and
    checkpoints stay as the general step leaves them; and the step itself, compiled as
    ``compile_after`` and ``ahead_of_time`` say
    (:class:`~rllib_geppo.core.compiled_step.CompiledStep`)."""

    def __init__(
        self,
        sources: tuple[list[Tensor], ...],
        stats: tuple[Tensor, ...],
        settings: Settings,
        *,
        name: str,
        dynamic: int,
        compile_after: int | None,
        inductor_options: dict | None,
        ahead_of_time: bool,
    ):
        self.sources = sources
        self.layouts = tuple(Layout(tuple(p.shape for p in ps)) for ps in sources)
        device = sources[0][0].device
        self.flats = tuple(torch.zeros(sum(layout.sizes), device=device) for layout in self.layouts)
        self.adam: tuple[Tensor, ...] = ()
        self.settings = settings
        self.stats = stats  # read at every step: the module's statistics, as it updates them
        # The statistics and rates of the update under way.
        self.constants: tuple[Tensor, ...] = ()
        self._run = CompiledStep(
            self._flat_step,
            self._flat_step,
            compile_after=compile_after,
            ahead_of_time=ahead_of_time,
            dynamic=dynamic,
            key=f"{settings!r} {self.layouts!r} {_SOURCE_HASH}",
            name=name,
            inductor_options=inductor_options,
        )

    @torch.no_grad()
    def _begin(self, optimizer: torch.optim.Adam, rates: tuple[float, ...]) -> None:
        """The module's weights, ``optimizer``'s state (none before the first step) and this
        update's ``rates``."""
        self.flats = tuple(torch.cat([p.reshape(-1) for p in ps]) for ps in self.sources)
        adam = []
        for params, flat in zip(self.sources, self.flats):
            states = [optimizer.state.get(p) or {} for p in params]
            for name in ("exp_avg", "exp_avg_sq"):
                adam.append(
                    torch.cat([s[name].reshape(-1) for s in states]) if states[0] else torch.zeros_like(flat)
                )
            count = float(states[0]["step"]) if states[0] else 0.0
            adam.append(torch.tensor(count, dtype=torch.float64, device=flat.device))
        self.adam = tuple(adam)
        self.constants = (*self.stats, *torch.tensor(rates, device=self.flats[0].device).unbind())

    @torch.no_grad()
    def end(self, optimizer: torch.optim.Adam) -> None:
        """After an update's steps: the weights back into the module, the moments and step
        counts into ``optimizer``'s state, as its own fused step keeps them (what checkpoints
        hold)."""
        for i, (params, layout, flat) in enumerate(zip(self.sources, self.layouts, self.flats)):
            exp_avg, exp_avg_sq, count = self.adam[3 * i : 3 * i + 3]
            for p, value, m, v in zip(params, *(layout.unflatten(t) for t in (flat, exp_avg, exp_avg_sq))):
                p.copy_(value)
                state = adam_state(optimizer, p)
                state["exp_avg"].copy_(m)
                state["exp_avg_sq"].copy_(v)
                state["step"].fill_(float(count))

    def _flat_step(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        raise NotImplementedError

    @property
    def how(self) -> str:
        """How the last step ran: "aot", "compiled" or "eager"
        (:attr:`~rllib_geppo.core.compiled_step.CompiledStep.how`)."""
        return self._run.how


class ManualStep(_HandStep):
    """The hand-derived step of GePPO's MLP module (Box actions): both networks, on flat
    copies of their weights and Adam state (:class:`_HandStep`).

    Args:
        pi, vf: the module's policy and value MLPs (``nn.Sequential`` of ``nn.Linear`` and one
            activation between layers: tanh, relu or linear).
        log_std: the policy's log-std parameter (normalised action units).
        obs_mean, obs_std: the module's observation statistics (read at every step).
        action_center, action_half_range: action units, a = center + half_range * a_n.
        settings: the step's fixed settings.
        compile_after: eager steps before the compiled ones (None: never compiled), as
            ``compile_learner`` resolves.
        ahead_of_time: compile with AOTInductor, falling back to ``torch.compile`` if that
            fails; False: ``torch.compile`` only (:class:`~rllib_geppo.core.compiled_step.CompiledStep`).
    """

    def __init__(
        self,
        pi: nn.Sequential,
        vf: nn.Sequential,
        log_std: nn.Parameter,
        *,
        obs_mean: Tensor,
        obs_std: Tensor,
        action_center: Tensor,
        action_half_range: Tensor,
        settings: Settings,
        compile_after: int | None = None,
        inductor_options: dict | None = None,
        ahead_of_time: bool = True,
    ):
        super().__init__(
            ([*_linear_params(pi), log_std], _linear_params(vf)),
            (obs_mean, obs_std, action_center, action_half_range),
            settings,
            name="hand-derived step",
            dynamic=len(STEP_COLUMNS),
            compile_after=compile_after,
            inductor_options=inductor_options,
            ahead_of_time=ahead_of_time,
        )

    def begin(
        self, optimizer: torch.optim.Adam, *, policy_lr: float, vf_lr: float, entropy_coeff: float
    ) -> None:
        """Before an update's steps: the module's weights, ``optimizer``'s state (none before
        the first step) and this update's lrs and entropy coefficient."""
        self._begin(optimizer, (policy_lr, vf_lr, entropy_coeff))

    def step(self, minibatch: dict[str, Tensor], clip_eps: Tensor, take: Tensor) -> tuple[Tensor, Tensor]:
        """One gradient step on a minibatch (advantages standardised already), taken where it
        is finite and ``take`` (0-d bool) holds. Returns ``(stats, finite)`` as the learner's
        ``minibatch_step``: the policy loss, the value loss and the policy's gradient norm
        before the clip, and whether all of them and the value gradient are finite."""
        stats, finite, *state = self._run(
            *self.flats,
            *self.adam,
            *self.constants,
            clip_eps,
            take,
            *(minibatch[column] for column in STEP_COLUMNS),
        )
        self.flats, self.adam = tuple(state[:2]), tuple(state[2:])
        return stats, finite

    def _flat_step(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """:func:`pure_step` on its tensors laid end to end, as the step compiles it: flats
        (2), Adam (6), statistics and action units (4), rates (3), the clip range, ``take``,
        then the :data:`STEP_COLUMNS`."""
        minibatch = dict(zip(STEP_COLUMNS, tensors[17:]))
        stats, finite, flats, adam = pure_step(
            self.settings, self.layouts, tensors[0:2], tensors[2:8], tensors[8:15], minibatch, *tensors[15:17]
        )
        return (stats, finite, *flats, *adam)


class ManualValueStep(_HandStep):
    """The hand-derived step of the value MLP alone, the critic's step of GeTRPO and GeVMPO
    (:func:`pure_value_step`): any action space, on flat copies of the network's weights and
    Adam state (:class:`_HandStep`). Arguments as :class:`ManualStep`'s."""

    def __init__(
        self,
        vf: nn.Sequential,
        *,
        obs_mean: Tensor,
        obs_std: Tensor,
        settings: Settings,
        compile_after: int | None = None,
        inductor_options: dict | None = None,
        ahead_of_time: bool = True,
    ):
        super().__init__(
            (_linear_params(vf),),
            (obs_mean, obs_std),
            settings,
            name="hand-derived value step",
            dynamic=len(VALUE_STEP_COLUMNS),
            compile_after=compile_after,
            inductor_options=inductor_options,
            ahead_of_time=ahead_of_time,
        )

    def begin(self, optimizer: torch.optim.Adam, *, vf_lr: float) -> None:
        """Before an update's steps: the network's weights, ``optimizer``'s state for them and
        this update's value lr."""
        self._begin(optimizer, (vf_lr,))

    def step(self, minibatch: dict[str, Tensor], take: Tensor) -> tuple[Tensor, Tensor]:
        """One value step on a minibatch, taken where it is finite and ``take`` holds. Returns
        ``(loss, finite)``: the value loss and whether it and the gradient are finite."""
        loss, finite, flat, *adam = self._run(
            *self.flats, *self.adam, *self.constants, take, *(minibatch[c] for c in VALUE_STEP_COLUMNS)
        )
        self.flats, self.adam = (flat,), tuple(adam)
        return loss, finite

    def _flat_step(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """:func:`pure_value_step` on its tensors laid end to end: the flat (1), Adam (3),
        statistics (2), the value lr, ``take``, then the :data:`VALUE_STEP_COLUMNS`."""
        minibatch = dict(zip(VALUE_STEP_COLUMNS, tensors[8:]))
        loss, finite, flat, adam = pure_value_step(
            self.settings, self.layouts[0], tensors[0], tensors[1:4], tensors[4:7], minibatch, tensors[7]
        )
        return (loss, finite, flat, *adam)
