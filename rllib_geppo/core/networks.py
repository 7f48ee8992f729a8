"""The fully connected networks of GePPO's RLModule, as a ``model_config`` describes them.

Their defaults live here once: GePPO's config starts from :data:`DEFAULT_MODEL_CONFIG`, the
module builds from :func:`mlp_config`, and the report labels trials by it, so a trial that
spells a default out and one that leaves it unset count as the same network. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The paper's network: two hidden layers of 64 tanh units, for the policy and the value function.
DEFAULT_MODEL_CONFIG: dict[str, Any] = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}


def mlp_config(model_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fully connected layers that ``model_config`` asks for, every default filled in.

    Returns ``fcnet_hiddens`` (the policy's hidden layer sizes, default [64, 64]),
    ``vf_fcnet_hiddens`` (the value network's, default: the policy's; the paper's wide-network
    runs widen the policy only) and ``fcnet_activation`` (default "tanh"). A None value counts
    as unset.
    """
    given = {key: value for key, value in (model_config or {}).items() if value is not None}
    hiddens = list(given.get("fcnet_hiddens", DEFAULT_MODEL_CONFIG["fcnet_hiddens"]))
    return {
        "fcnet_hiddens": hiddens,
        "vf_fcnet_hiddens": list(given.get("vf_fcnet_hiddens", hiddens)),
        "fcnet_activation": given.get("fcnet_activation", DEFAULT_MODEL_CONFIG["fcnet_activation"]),
    }
