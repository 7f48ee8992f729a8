"""GePPO's minibatch step for its own MLP module, written out by hand: the floor of its cost.

One step of the paper's networks (a Gaussian policy MLP with a state-independent log-std and a
value MLP, both on normalised observations) is a handful of small matrix products. Autograd,
the optimizer's bookkeeping and one tensor per parameter add more time than the arithmetic.
:class:`ManualStep` does the same step with nothing else:

- the forward pass, keeping what the backward pass reads;
- the backward pass derived by hand (below), each gradient written into its slice of one flat
  buffer per network;
- the policy's global-norm clip and the finite check;
- one Adam step per network on the flat buffers, skipped where the step is not finite.

It runs eagerly, or compiled whole with ``torch.compile(step.step)``, Adam included.

The math is that of ``objective.geppo_losses``, ``gradients.clip_and_check`` with
``scope="policy"`` and ``clip_by="global_norm"``, and torch's Adam, on the module's parameters
laid end to end (``tests/core/test_manual_step.py`` holds it to autograd and ``torch.optim.Adam``).
Pure torch; no Ray.

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

import math
from collections.abc import Sequence

import torch
from torch import nn

Tensor = torch.Tensor

#: The activations and their derivatives as functions of their output h = act(z).
_DERIVATIVES = {
    "tanh": lambda h: 1.0 - h * h,
    "relu": lambda h: (h > 0).to(h.dtype),
    "linear": lambda h: torch.ones_like(h),
}
_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "linear": lambda z: z}


class FlatMLP:
    """An MLP's weights and biases as views of one flat buffer, with a flat gradient of the
    same layout; ``extra`` trailing entries hold other parameters (the policy's log-std)."""

    def __init__(self, linears: Sequence[nn.Linear], extra: int = 0):
        shapes = [s for linear in linears for s in (linear.weight.shape, linear.bias.shape)]
        sizes = [math.prod(s) for s in shapes] + ([extra] if extra else [])
        self.flat = torch.zeros(sum(sizes))
        self.grad = torch.zeros_like(self.flat)
        self.params = _views(self.flat, sizes, shapes)
        self.grads = _views(self.grad, sizes, shapes)
        with torch.no_grad():
            for view, source in zip(
                self.params, [p for linear in linears for p in (linear.weight, linear.bias)]
            ):
                view.copy_(source)

    @property
    def layers(self) -> list[tuple[Tensor, Tensor]]:
        return list(zip(self.params[0:-1:2], self.params[1::2]))


def _views(flat: Tensor, sizes: list[int], shapes: list) -> list[Tensor]:
    views, start = [], 0
    for size, shape in zip(sizes, [*shapes, None]):
        view = flat[start : start + size]
        views.append(view.view(shape) if shape is not None else view)
        start += size
    return views


class FlatAdam:
    """torch's Adam (no weight decay, no amsgrad) on one flat parameter buffer, its step taken
    only where ``take`` (a 0-d bool tensor) holds, decided without leaving the device. The lr
    and the step count are tensors, so that a compiled step recompiles for neither."""

    def __init__(self, flat: Tensor, lr: float, eps: float, betas: tuple[float, float] = (0.9, 0.999)):
        self.flat, self.eps, self.betas = flat, eps, betas
        self.lr = torch.tensor(lr, dtype=flat.dtype)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(flat), torch.zeros_like(flat)
        self.step_count = torch.zeros((), dtype=flat.dtype)

    def step(self, grad: Tensor, take: Tensor) -> None:
        beta1, beta2 = self.betas
        self.step_count.add_(take.to(self.step_count.dtype))
        exp_avg = torch.lerp(self.exp_avg, grad, 1 - beta1)
        exp_avg_sq = self.exp_avg_sq * beta2 + (1 - beta2) * grad * grad
        bias1, bias2_sqrt = 1 - beta1**self.step_count, torch.sqrt(1 - beta2**self.step_count)
        update = exp_avg / (torch.sqrt(exp_avg_sq) / bias2_sqrt + self.eps) * (-self.lr / bias1)
        self.exp_avg.copy_(torch.where(take, exp_avg, self.exp_avg))
        self.exp_avg_sq.copy_(torch.where(take, exp_avg_sq, self.exp_avg_sq))
        self.flat.add_(torch.where(take, update, 0.0))


class ManualStep:
    """The minibatch step of GePPO's MLP module (Box actions) by hand, on copies of its weights.

    Args:
        pi, vf: the module's policy and value MLPs (``nn.Sequential`` of ``nn.Linear`` and one
            activation between layers: tanh, relu or linear).
        log_std: the policy's log-std parameter (normalised action units).
        activation: the MLPs' activation.
        obs_mean, obs_std: the module's observation statistics; observations are normalised to
            clamp((obs - mean) / std, -obs_clip, obs_clip).
        action_center, action_half_range: action units, a = center + half_range * a_n.
        min_log_std: the floor of the log-std, log(MIN_STD).
        policy_lr, vf_lr, adam_eps, grad_clip, entropy_coeff, vf_clip_param: as GePPO's settings.
    """

    def __init__(
        self,
        pi: nn.Sequential,
        vf: nn.Sequential,
        log_std: Tensor,
        *,
        activation: str,
        obs_mean: Tensor,
        obs_std: Tensor,
        obs_clip: float,
        action_center: Tensor,
        action_half_range: Tensor,
        min_log_std: float,
        policy_lr: float,
        vf_lr: float,
        adam_eps: float,
        grad_clip: float | None,
        entropy_coeff: float = 0.0,
        vf_clip_param: float = math.inf,
    ):
        self.act, self.derivative = _ACTIVATIONS[activation], _DERIVATIVES[activation]
        self.pi = FlatMLP([m for m in pi if isinstance(m, nn.Linear)], extra=log_std.numel())
        self.vf = FlatMLP([m for m in vf if isinstance(m, nn.Linear)])
        with torch.no_grad():
            self.pi.params[-1].copy_(log_std)
        self.obs_mean, self.obs_std, self.obs_clip = obs_mean, obs_std, obs_clip
        self.action_center, self.action_half_range = action_center, action_half_range
        self.min_log_std = min_log_std
        self.grad_clip, self.entropy_coeff, self.vf_clip_param = grad_clip, entropy_coeff, vf_clip_param
        self.pi_adam = FlatAdam(self.pi.flat, policy_lr, adam_eps)
        self.vf_adam = FlatAdam(self.vf.flat, vf_lr, adam_eps)

    @property
    def log_std(self) -> Tensor:
        return self.pi.params[-1]

    @torch.no_grad()
    def step(
        self,
        obs: Tensor,
        actions: Tensor,
        behaviour_logp: Tensor,
        center: Tensor,
        advantages: Tensor,
        value_targets: Tensor,
        weights: Tensor,
        clip_eps: float,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One gradient step on a minibatch (advantages standardised already). Returns the
        policy loss, the value loss and whether the step was finite and taken (0-d tensors:
        nothing here waits for the device)."""
        x = torch.clamp((obs - self.obs_mean) / self.obs_std, -self.obs_clip, self.obs_clip)
        policy_loss = self._policy_gradients(
            x, actions, behaviour_logp, center, advantages, weights, clip_eps
        )
        value_loss = self._value_gradients(x, value_targets, weights)
        norm = torch.linalg.vector_norm(self.pi.grad)
        if self.grad_clip:
            self.pi.grad.mul_(torch.clamp(self.grad_clip / (norm + 1e-6), max=1.0))
        finite = torch.isfinite(policy_loss + value_loss + norm + torch.linalg.vector_norm(self.vf.grad))
        self.pi_adam.step(self.pi.grad, finite)
        self.vf_adam.step(self.vf.grad, finite)
        return policy_loss, value_loss, finite

    def _policy_gradients(self, x, actions, behaviour_logp, center, advantages, weights, clip_eps) -> Tensor:
        layers, hidden = self._forward(self.pi.layers, x)
        mu = hidden[-1]
        log_std = torch.clamp(self.log_std, min=self.min_log_std)
        inv_std = torch.exp(-log_std)
        u = ((actions - self.action_center) / self.action_half_range - mu) * inv_std
        logp = (
            (-0.5 * u * u - log_std).sum(-1)
            - torch.log(self.action_half_range).sum()
            - 0.5 * math.log(2 * math.pi) * mu.shape[-1]
        )
        rho = torch.exp(logp - behaviour_logp)
        low, high = center - clip_eps, center + clip_eps
        unclipped, clipped = -rho * advantages, -torch.clamp(rho, low, high) * advantages
        n = x.shape[0]
        loss = torch.mean(weights * torch.maximum(unclipped, clipped))
        in_range = ((rho >= low) & (rho <= high)).to(x.dtype)
        share = torch.where(
            unclipped > clipped, 1.0, torch.where(unclipped < clipped, in_range, 0.5 + 0.5 * in_range)
        )
        dlogp = -(weights / n) * advantages * share * rho
        entropy_grad = 0.0
        if self.entropy_coeff:
            entropy = (log_std + torch.log(self.action_half_range) + 0.5 + 0.5 * math.log(2 * math.pi)).sum()
            loss = loss - self.entropy_coeff * torch.mean(weights) * entropy
            entropy_grad = -self.entropy_coeff * torch.mean(weights)
        dmu = dlogp[:, None] * u * inv_std
        dlog_std = (dlogp[:, None] * (u * u - 1.0)).sum(0) + entropy_grad
        self.pi.grads[-1].copy_(dlog_std * (self.log_std >= self.min_log_std))
        self._backward(self.pi, layers, hidden, dmu)
        return loss

    def _value_gradients(self, x, value_targets, weights) -> Tensor:
        layers, hidden = self._forward(self.vf.layers, x)
        error = value_targets - hidden[-1][:, 0]
        squared = error * error
        dv = -(weights / x.shape[0]) * error
        if math.isfinite(self.vf_clip_param):
            dv = dv * (squared <= self.vf_clip_param)
            squared = torch.clamp(squared, max=self.vf_clip_param)
        self._backward(self.vf, layers, hidden, dv[:, None])
        return 0.5 * torch.mean(weights * squared)

    def _forward(self, layers, x) -> tuple[list, list[Tensor]]:
        """Each layer's input and the last layer's output (no activation on it)."""
        inputs = [x]
        for i, (weight, bias) in enumerate(layers):
            z = torch.addmm(bias, inputs[-1], weight.t())
            inputs.append(z if i == len(layers) - 1 else self.act(z))
        return layers, inputs

    def _backward(self, net: FlatMLP, layers, inputs: list[Tensor], grad_out: Tensor) -> None:
        """Backpropagate ``grad_out`` (d loss / d output) through ``layers``, writing each
        weight's and bias's gradient into ``net.grads``."""
        for i in reversed(range(len(layers))):
            weight, _ = layers[i]
            torch.mm(grad_out.t(), inputs[i], out=net.grads[2 * i])
            torch.sum(grad_out, 0, out=net.grads[2 * i + 1])
            if i:
                grad_out = torch.mm(grad_out, weight) * self.derivative(inputs[i])
