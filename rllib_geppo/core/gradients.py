"""Clipping the policy's gradients (both API stacks; the value function is never clipped).

Pure torch; no Ray.
"""

from __future__ import annotations

from typing import Sequence

import torch

#: RLlib's ``grad_clip_by`` values.
CLIP_BY = ("global_norm", "norm", "value")


def clip_gradients_(params: Sequence[torch.nn.Parameter], grad_clip: float | None,
                    clip_by: str = "global_norm") -> torch.Tensor:
    """Clip the gradients of ``params`` in place, as RLlib's ``grad_clip_by`` says, and return
    their global L2 norm before clipping (a 0-d tensor; non-finite if any gradient is).

    ``"global_norm"`` scales all gradients together so that their joint norm is at most
    ``grad_clip`` (the paper's); ``"norm"`` does so per tensor; ``"value"`` clamps every entry
    to +-grad_clip. ``grad_clip=None`` only measures the norm.
    """
    if clip_by not in CLIP_BY:
        raise ValueError(f"clip_by must be one of {CLIP_BY}, got {clip_by!r}.")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm = torch.nn.utils.get_total_norm(grads)
    if grad_clip:
        if clip_by == "global_norm":
            torch.nn.utils.clip_grads_with_norm_(params, grad_clip, norm)
        else:
            for grad in grads:
                if clip_by == "norm":
                    grad.mul_(torch.clamp(grad_clip / (grad.norm() + 1e-6), max=1.0))
                else:
                    grad.clamp_(-grad_clip, grad_clip)
    return norm
