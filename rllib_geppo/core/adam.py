"""An Adam step that is skipped on the device when the step is not finite.

Pure torch; no Ray.
"""

from __future__ import annotations

import torch
from torch.optim.adam import adam

Tensor = torch.Tensor


def policy_and_value_adam(
    policy_params: list[torch.nn.Parameter],
    value_params: list[torch.nn.Parameter],
    *,
    lr: float,
    vf_lr: float,
    eps: float,
    device: torch.device,
) -> torch.optim.Adam:
    """GePPO's optimizer on both API stacks: one Adam with two parameter groups, the policy's
    (``param_groups[0]``, the adaptive lr) and the value function's (``param_groups[1]``,
    ``vf_lr``). Adam is elementwise, so this is exactly two separate Adams, in one kernel: the
    fused one where torch has it for the device (CPU, CUDA), else foreach."""
    fast = {"fused": True} if device.type in ("cpu", "cuda") else {"foreach": True}
    return torch.optim.Adam(
        [{"params": policy_params, "lr": lr}, {"params": value_params, "lr": vf_lr}], eps=eps, **fast
    )


def adam_step_if(optimizer: torch.optim.Adam, condition: Tensor) -> None:
    """``optimizer.step()`` on the gradients in ``.grad``, only where ``condition`` (a 0-d bool
    tensor) holds; otherwise weights, moments and step counts stay exactly as they were.

    A fused Adam (CPU, CUDA) takes the skip as its ``found_inf`` flag and decides on the device,
    so the epoch loop never waits for a GPU. It is called through torch's functional
    ``torch.optim.adam.adam`` with the optimizer's own state and settings, which keeps
    checkpoints as ``optimizer.step()`` writes them but skips ``Optimizer.step``'s per-call
    bookkeeping (hooks, profiling, regrouping by device), which cost a small network's step
    more than the fused kernel itself. Other Adams decide on the host and call ``step()``.
    Parameters without a gradient are left alone, as ``step()`` does.
    """
    if not optimizer.defaults.get("fused"):
        if condition:
            optimizer.step()
        return
    found_inf = (~condition).float()
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        states = [adam_state(optimizer, p) for p in params]
        beta1, beta2 = group["betas"]
        adam(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [s["max_exp_avg_sq"] for s in states if "max_exp_avg_sq" in s],
            [s["step"] for s in states],
            fused=True,
            found_inf=found_inf,
            amsgrad=group["amsgrad"],
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
            decoupled_weight_decay=group.get("decoupled_weight_decay", False),
        )


def adam_state(optimizer: torch.optim.Adam, p: torch.nn.Parameter) -> dict[str, Tensor]:
    """``p``'s Adam state, created as a fused Adam creates it on its first step."""
    state = optimizer.state[p]
    if not state:
        state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if optimizer.defaults.get("amsgrad"):
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    return state
