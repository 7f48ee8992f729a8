"""Named settings that change several of GePPO's defaults together.

``SCALE`` takes few, large gradient steps per update instead of the paper's 320 small ones, so
that the learner keeps up with more samplers: 5 epochs of 4 minibatches over the stored samples
(20 steps of about 1,024 samples at n = 1,024), with both Adam step sizes scaled by the square
root of the 16-fold cut in gradient steps (3e-4 x sqrt(320 / 20) = 1.2e-3; the minibatch grew
8-fold, for which Hilton et al.'s square-root rule for batch size would give x2.83); the
TV-driven policy lr adapts from there as always. It costs a fraction of the
paper's learner time per env step and learns less per sample than the paper's settings (both
measured in docs/results/learner_steps/README.md). ``tuned_examples/geppo_scale.yaml`` holds
the same values.

.. code-block:: python

    from rllib_geppo import GePPOConfig
    from rllib_geppo.presets import SCALE

    config = GePPOConfig().environment("Hopper-v5").training(**SCALE)
"""

from __future__ import annotations

#: Few large gradient steps per update (see the module docstring).
SCALE: dict[str, float | int] = {
    "num_epochs": 5,
    "num_minibatches": 4,
    "lr": 1.2e-3,
    "vf_lr": 1.2e-3,
}
