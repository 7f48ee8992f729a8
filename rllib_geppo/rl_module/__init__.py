"""GePPO's RLModule (:class:`GePPOTorchRLModule`) and the checks every trained module passes in
the driver before any worker starts."""

from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule

__all__ = ["GePPOTorchRLModule"]
