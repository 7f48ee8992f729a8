"""The column names of GePPO's batches, shared by both API stacks (in the manner of RLlib's
``Columns``).

Stored columns reuse RLlib's strings (``ray.rllib.core.columns.Columns``, ``WEIGHTS_SEQ_NO``), so a
GePPO batch reads like an RLlib train batch; the layout is described in
:mod:`rllib_geppo.core.segments`. Pure Python; no Ray.
"""


class GePPOColumns:
    """Names of the columns of a stored batch and of an update batch."""

    # Stored: one row per env step, plus one phantom row closing each trajectory segment.
    OBS = "obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"  # True at the last step of a segment that ended the episode
    BEHAVIOUR_LOGP = "action_logp"  # log mu(a|s) of the policy that collected the step
    VERSION = "weights_seq_no"  # the version of that policy (the learner's update count)
    LOSS_MASK = "loss_mask"  # False on phantom rows, which hold s_T for bootstrapping

    # Computed at the start of every update, under pi_k, for the real rows.
    PIK_LOGP = "geppo_pik_logp"  # log pi_k(a|s)
    CENTER = "geppo_center"  # pi_k / mu: the centre of the clip range
    PIK_DIST_INPUTS = "geppo_pik_dist_inputs"  # pi_k's distribution inputs, for the KL diagnostic
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    SAMPLE_WEIGHTS = "geppo_sample_weights"  # nu[age], rescaled to mean 1 over the store

    STORED = (OBS, ACTIONS, REWARDS, TERMINATEDS, BEHAVIOUR_LOGP, VERSION, LOSS_MASK)
