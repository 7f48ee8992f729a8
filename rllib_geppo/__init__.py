"""GePPO (Generalized Proximal Policy Optimization with Sample Reuse) for Ray RLlib."""

__version__ = "0.1.0"
