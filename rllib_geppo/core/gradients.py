"""Clipping gradients, checking that a step is finite (both API stacks; by default only the
policy's gradients are clipped, never the value function's), and averaging losses and gradients
over several learners.

Pure torch; no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Tensor = torch.Tensor

#: RLlib's ``grad_clip_by`` values.
CLIP_BY = ("global_norm", "norm", "value")
#: What ``grad_clip`` clips: the policy's gradients (the paper's), or policy and value together.
CLIP_SCOPES = ("policy", "all")


def clip_gradients(
    grads: Sequence[Tensor], grad_clip: float | None, clip_by: str = "global_norm"
) -> tuple[list[Tensor], Tensor]:
    """``grads`` clipped as RLlib's ``grad_clip_by`` says, and their global L2 norm before
    clipping (a 0-d tensor; non-finite if any gradient is). Returns new tensors.

    ``"global_norm"`` scales all gradients together so that their joint norm is at most
    ``grad_clip`` (the paper's); ``"norm"`` does so per tensor; ``"value"`` clamps every entry
    to +-grad_clip. ``grad_clip=None`` (or 0) only measures the norm. The scale is
    ``min(1, grad_clip / (norm + 1e-6))``, as ``torch.nn.utils.clip_grad_norm_``'s.
    """
    if clip_by not in CLIP_BY:
        raise ValueError(f"clip_by must be one of {CLIP_BY}, got {clip_by!r}.")
    grads = list(grads)
    if not grads:
        return grads, torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    if not grad_clip:
        return grads, norm
    if clip_by == "global_norm":
        scale = torch.clamp(grad_clip / (norm + 1e-6), max=1.0)
        return [g * scale for g in grads], norm
    if clip_by == "norm":
        return [
            g * torch.clamp(grad_clip / (torch.linalg.vector_norm(g) + 1e-6), max=1.0) for g in grads
        ], norm
    return [torch.clamp(g, -grad_clip, grad_clip) for g in grads], norm


def clip_gradients_(
    params: Sequence[torch.nn.Parameter], grad_clip: float | None, clip_by: str = "global_norm"
) -> Tensor:
    """:func:`clip_gradients` in place on the ``.grad`` of ``params`` (those that have one);
    returns the norm before clipping."""
    with_grad = [p for p in params if p.grad is not None]
    clipped, norm = clip_gradients([p.grad for p in with_grad], grad_clip, clip_by)
    for p, grad in zip(with_grad, clipped):
        p.grad = grad
    return norm


def clip_and_check(
    losses: Sequence[Tensor],
    policy_grads: Sequence[Tensor],
    value_grads: Sequence[Tensor],
    *,
    grad_clip: float | None,
    clip_by: str = "global_norm",
    scope: str = "policy",
) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
    """One gradient step's clip and finite check.

    Args:
        losses: the step's 0-d losses (policy, value).
        policy_grads, value_grads: their gradients, per parameter.
        grad_clip, clip_by: as in :func:`clip_gradients`.
        scope: ``"policy"`` clips the policy's gradients only (the paper's); ``"all"`` clips
            policy and value by one norm over both (SB3's).

    Returns:
        ``(stats, finite, policy_grads, value_grads)``: ``stats`` stacks the losses and the
        policy's gradient norm before clipping (the joint norm with ``scope="all"``);
        ``finite`` (0-d bool) says whether the stats and every gradient are finite, i.e.
        whether the step may be applied; then the clipped gradients.
    """
    if scope not in CLIP_SCOPES:
        raise ValueError(f"scope must be one of {CLIP_SCOPES}, got {scope!r}.")
    if scope == "policy":
        policy_grads, policy_norm = clip_gradients(policy_grads, grad_clip, clip_by)
        value_grads, value_norm = clip_gradients(value_grads, None)
    else:
        both, policy_norm = clip_gradients([*policy_grads, *value_grads], grad_clip, clip_by)
        policy_grads, value_grads, value_norm = (
            both[: len(policy_grads)],
            both[len(policy_grads) :],
            policy_norm,
        )
    stats = torch.stack([*(loss.detach() for loss in losses), policy_norm])
    return stats, torch.isfinite(stats.sum() + value_norm), policy_grads, value_grads


def mean_over_learners(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Each tensor averaged over the learners of torch's default process group, in one
    all-reduce (of all of them flattened into one vector). Returns new tensors, shaped as given.

    Several learners average their losses and gradients with this before the clip and the
    finite check, so that every learner clips the same gradient, makes the same decision and
    takes the same step.
    """
    tensors = list(tensors)
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    torch.distributed.all_reduce(flat)
    flat /= torch.distributed.get_world_size()
    return [part.view_as(t) for part, t in zip(torch.split(flat, [t.numel() for t in tensors]), tensors)]
