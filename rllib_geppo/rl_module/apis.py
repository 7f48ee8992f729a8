"""What GePPO reads of any RLModule, its own or a user's: pi's distribution inputs and V(s) from
one training pass, and which of its parts are the value function (which get their own optimizer
group: ``vf_lr``, no gradient clip). Through RLlib's public APIs only: ``forward_train``,
``ValueFunctionAPI.compute_values`` and ``InferenceOnlyAPI.get_non_inference_attributes``.
"""

from __future__ import annotations

import functools

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI

Tensor = torch.Tensor


def value_function_attributes(module) -> list[str]:
    """The attributes holding ``module``'s value function (RLlib's
    ``InferenceOnlyAPI.get_non_inference_attributes``), which get the value optimizer group:
    their own lr (``vf_lr``), no gradient clip. Raises ValueError for a module that names none,
    whose value function would be clipped with the policy and trained at the adaptive policy lr."""
    names = module.get_non_inference_attributes() if isinstance(module, InferenceOnlyAPI) else []
    if not names:
        raise ValueError(
            f"{type(module).__name__} does not name its value function's parts (RLlib's "
            "InferenceOnlyAPI.get_non_inference_attributes), so GePPO cannot give them their own "
            "optimizer: the value gradient would be clipped with the policy's and trained at the "
            "adaptive policy lr. Fix: implement ray.rllib.core.rl_module.apis.InferenceOnlyAPI "
            "and return the attributes only the value function uses, e.g. ['vf'] "
            "(docs/your_environment.md)."
        )
    return list(names)


def forward_train(module, obs: Tensor) -> tuple[Tensor, Tensor]:
    """pi's distribution inputs and V(s) for ``obs`` from the module's ``forward_train``, with
    the values from ``compute_values`` (fed the pass's embeddings, where it has them) for a
    module whose ``forward_train`` gives none."""
    batch = {Columns.OBS: obs}
    out = module.forward_train(batch)
    values = out.get(Columns.VF_PREDS)
    if values is None:
        values = module.compute_values(batch, embeddings=out.get(Columns.EMBEDDINGS))
    return out[Columns.ACTION_DIST_INPUTS], values


class TrainForward(torch.nn.Module):
    """:func:`forward_train` as a module's ``forward``, for ``torch.func.functional_call``
    (which calls a module's ``forward`` with the parameters it is given)."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        return forward_train(self.module, obs)


def value_function_parameters(module) -> list[torch.nn.Parameter]:
    """The value function's own parameters, which get ``vf_lr``: those of the attributes the
    module names as not needed for acting (RLlib's ``InferenceOnlyAPI``,
    :func:`value_function_attributes`)."""
    params: dict[int, torch.nn.Parameter] = {}
    for attribute in value_function_attributes(module):
        part = functools.reduce(getattr, attribute.split("."), module)
        params.update({id(p): p for p in part.parameters()})
    return list(params.values())
