"""A trained policy outside Ray: :class:`~rllib_geppo.deployment.saved_policy.SavedPolicy`."""
