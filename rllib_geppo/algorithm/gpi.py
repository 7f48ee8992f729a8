"""GeTRPO and GeVMPO, the rest of the authors' family of generalized policy improvement
algorithms (Queeney, Paschalidis and Cassandras, IEEE TAC 2025; code: jqueeney/gpi), beside
GePPO: its configs and Algorithms with another learner.

Everything but the policy's update is GePPO's: the store of the last M batches and their
weights nu, V-trace targets under pi_k, the normalisation, the overlapped sampling, the
checkpoints, multi-agent training and the refusals. Each update trains the critic, then takes
one natural-gradient step of the policy under a KL bound delta = eps^2 / 2 with eps GePPO's
(eps_PPO / E_nu[i + 1]): the learner is :mod:`rllib_geppo.learner.natural_gradient`.
``sample_reuse=False`` gives TRPO and V-MPO (nu = [1], B x n new samples per iteration,
delta = eps_PPO^2 / 2 = 0.02).

.. code-block:: python

    from rllib_geppo import GeTRPOConfig
    algo = GeTRPOConfig().environment("Hopper-v5").build_algo()
"""

from __future__ import annotations

from ray.rllib.utils.annotations import override

from rllib_geppo.algorithm.geppo import GePPO, GePPOConfig


class GeTRPOConfig(GePPOConfig):
    """Configuration for :class:`GeTRPO`: GePPO's settings and defaults, with nothing adapted
    (``adaptive_lr=False``: the policy has no lr) and the natural-gradient step's own settings
    (``cg_iterations``, ``cg_damping``, ``kl_max_factor``, ``max_backtracks``; the authors'
    defaults)."""

    natural_gradient = True

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GeTRPO)
        self.adaptive_lr = False

    @override(GePPOConfig)
    def get_default_learner_class(self):
        from rllib_geppo.learner.natural_gradient import GeTRPOTorchLearner

        return GeTRPOTorchLearner


class GeTRPO(GePPO):
    """Generalized TRPO with sample reuse: GePPO's store and targets, the policy updated by one
    natural-gradient step per iteration."""

    @classmethod
    @override(GePPO)
    def get_default_config(cls) -> GeTRPOConfig:
        return GeTRPOConfig()


class GeVMPOConfig(GeTRPOConfig):
    """Configuration for :class:`GeVMPO`: GeTRPO's settings."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GeVMPO)

    @override(GeTRPOConfig)
    def get_default_learner_class(self):
        from rllib_geppo.learner.natural_gradient import GeVMPOTorchLearner

        return GeVMPOTorchLearner


class GeVMPO(GePPO):
    """Generalized V-MPO with sample reuse: the E-step's targets from the weighted dual over the
    whole store, the M-step one natural-gradient step of their weighted likelihood."""

    @classmethod
    @override(GePPO)
    def get_default_config(cls) -> GeVMPOConfig:
        return GeVMPOConfig()
