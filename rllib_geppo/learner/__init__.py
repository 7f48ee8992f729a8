"""GePPO's update inside RLlib's Learner: :class:`GePPOLearner` (the update, framework-free) and
:class:`GePPOTorchLearner` (the loss and the gradient steps on torch)."""
