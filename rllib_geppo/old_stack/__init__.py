"""GePPO on RLlib's deprecated old API stack: :class:`GePPOTorchPolicy` and its training step.

Imported only when a config selects the old stack (``GePPO.get_default_policy_class`` and
``GePPO.training_step``), as RLlib's PPO does; dropping the old stack means deleting this folder.
"""
