"""GePPO's math and data structures: pure numpy/scipy/torch, no Ray (a test checks this).

Both API stacks call these functions; the RLlib classes around them are thin adapters.

| module | what |
| --- | --- |
| ``objective`` | the generalized clipped loss, GeTRPO's surrogate, value loss, diagnostics, the lr rule |
| ``natural_gradient`` | the KL-bounded step of GeTRPO and GeVMPO: conjugate gradient, line search |
| ``vmpo`` | GeVMPO's temperature (V-MPO's dual), targets and weighted maximum-likelihood loss |
| ``vtrace`` | V-trace-corrected GAE |
| ``targets`` | an update's advantages, value targets, sample weights and columns from a laid-out batch |
| ``policy_weights`` | nu from the paper's convex programs, clip multiple, ESS, lag |
| ``sample_reuse`` | what the sample-reuse settings imply: nu, the clip range at a lag, the lag, ... |
| ``sample_store`` | FIFO store of the last M batches, each tagged with its policy version |
| ``segments`` | trajectory segments laid out end to end: building, joining, checking |
| ``minibatches`` | an update's minibatches: shared shuffles, each learner's slice |
| ``normalization`` | running statistics for observations and rewards |
| ``columns`` | the names of batch columns |
| ``networks`` | the module's fully connected layers from a ``model_config``, defaults filled in |
| ``update_inputs`` | what the Algorithm decides once per update for every learner |
| ``module_state`` | what GePPO keeps for one trained module: its store, statistics and lr |
| ``module_stores`` | every trained module's state and an update's decisions: the door of both API stacks |
| ``gradients`` | the gradient clip and finite check, and the learners' mean of losses and gradients |
| ``adam`` | the fused Adam step, skipped on the device when a step is not finite |
| ``compiled_step`` | a step run eagerly, then compiled once: ahead of time, or by ``torch.compile`` |
| ``manual_step`` | the minibatch step of GePPO's MLP module, its backward pass derived by hand |
| ``rules`` | one way of saying no: a setting's rule and its message |
| ``schedules`` | RLlib's schedules of ``lr`` and ``entropy_coeff``: their values by env steps sampled |
"""
