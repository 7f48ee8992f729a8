"""GePPO's training step on RLlib's old API stack (RolloutWorkers and :class:`GePPOTorchPolicy`).

``GePPO.training_step`` calls :func:`training_step_old_api_stack` when the config selects the old
stack with ``.api_stack(enable_rl_module_and_learner=False,
enable_env_runner_and_connector_v2=False)``. An iteration mirrors the new stack's, through the
same :class:`~rllib_geppo.core.module_stores.ModuleStores` (store, statistics, lr rule and
metrics):

1. sample n env steps with pi_k from the RolloutWorkers;
2. lay them out as trajectory segments, tagged with pi_k's version, and append them to the
   store; update the running observation and return statistics;
3. recompute pi_k log-probs, values and V-trace advantages for every stored sample on the
   policy's device (never the workers' collection-time advantages), then ``num_epochs`` x
   minibatches of gradient steps;
4. adapt the policy lr from the TV estimate of the update;
5. install the new observation statistics and sync the weights to the workers, waiting for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from ray.rllib.utils.metrics import (
    LEARN_ON_BATCH_TIMER,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_TRAINED,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_TRAINED,
    NUM_GRAD_UPDATES_LIFETIME,
    SAMPLE_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
)
from ray.rllib.utils.metrics.learner_info import LEARNER_STATS_KEY
from ray.rllib.utils.typing import ResultDict

from rllib_geppo import private_ray
from rllib_geppo.core.minibatches import epoch_orders, minibatch_shape
from rllib_geppo.core.module_stores import ModuleStores
from rllib_geppo.core.segments import Segment
from rllib_geppo.core.update_inputs import UpdateInputs
from rllib_geppo.old_stack.torch_policy import SEGMENT_END, GePPOTorchPolicy

#: The old stack's internals this module reads: ``Algorithm._timers`` and ``_counters``.
PRIVATE_RAY_NAMES = private_ray.OLD_STACK


def training_step_old_api_stack(algorithm: Any) -> ResultDict:
    """One GePPO iteration of ``algorithm`` (a :class:`~rllib_geppo.GePPO`) on the old API stack
    (see the module docstring): its module stores, RolloutWorkers and config, and RLlib's
    old-stack timers and step counters, which this step fills."""
    stores: ModuleStores = algorithm.stores
    workers, config, iteration = algorithm.env_runner_group, algorithm.config, algorithm.iteration + 1
    timers, counters = algorithm._timers, algorithm._counters
    with timers[SAMPLE_TIMER]:
        batch = synchronous_parallel_sample(
            worker_set=workers,
            max_env_steps=config.samples_per_iteration,
            sample_timeout_s=config.sample_timeout_s,
        )
    if not batch:
        return {}
    batch = batch.as_multi_agent().policy_batches[DEFAULT_POLICY_ID]
    counters[NUM_ENV_STEPS_SAMPLED] += batch.env_steps()
    counters[NUM_AGENT_STEPS_SAMPLED] += batch.agent_steps()
    dropped = stores.add(DEFAULT_POLICY_ID, batch_segments(batch, stores.policy_version), iteration=iteration)
    if not stores.may_update(DEFAULT_POLICY_ID, iteration=iteration):
        return {}

    policy: GePPOTorchPolicy = workers.local_env_runner.get_policy()
    inputs = stores.update_inputs(DEFAULT_POLICY_ID, counters[NUM_ENV_STEPS_SAMPLED])
    with timers[LEARN_ON_BATCH_TIMER]:
        stats, rows = update_policy(policy, stores.layout(DEFAULT_POLICY_ID), inputs, config)
    counters[NUM_ENV_STEPS_TRAINED] += rows
    counters[NUM_AGENT_STEPS_TRAINED] += rows
    stats.update(stores.metrics(DEFAULT_POLICY_ID, inputs), num_dropped_segments=dropped)
    stores.adapt_lr(
        DEFAULT_POLICY_ID,
        stats["tv"],
        inputs.clip_eps,
        iteration=iteration,
        complete=stats["num_skipped_steps"] < stats["num_gradient_steps"],
    )
    stores.record_update([DEFAULT_POLICY_ID])

    policy.set_obs_stats(inputs.obs_mean, inputs.obs_std)
    with timers[SYNCH_WORKER_WEIGHTS_TIMER]:
        # timeout_seconds=None waits: RLlib's default (0) is fire-and-forget, and GePPO's
        # ages need each new batch to come from the new policy.
        workers.sync_weights(
            policies=[DEFAULT_POLICY_ID],
            timeout_seconds=None,
            global_vars={"timestep": counters[NUM_AGENT_STEPS_SAMPLED]},
        )
    return {
        DEFAULT_POLICY_ID: {
            LEARNER_STATS_KEY: stats,
            NUM_AGENT_STEPS_TRAINED: stores[DEFAULT_POLICY_ID].store.num_steps,
            NUM_GRAD_UPDATES_LIFETIME: policy.num_grad_updates,
        }
    }


def batch_segments(batch: SampleBatch, version: int) -> list[Segment]:
    """A RolloutWorker's sample batch as trajectory segments, every step tagged with ``version``.

    Chunks end where ``postprocess_trajectory`` marked them; s_T is the chunk's last next-obs. A
    RolloutWorker picks each fragment's first action before the weight sync, with the previous
    policy: that step's behaviour log-prob is the true one, only its age is one iteration off.
    """
    ends = np.flatnonzero(batch[SEGMENT_END]) + 1
    segments = []
    for start, end in zip(np.concatenate([[0], ends[:-1]]), ends):
        chunk = batch.slice(int(start), int(end))
        segments.append(
            Segment(
                obs=np.concatenate([chunk[SampleBatch.OBS], chunk[SampleBatch.NEXT_OBS][-1:]]),
                actions=chunk[SampleBatch.ACTIONS],
                rewards=chunk[SampleBatch.REWARDS],
                behaviour_logp=chunk[SampleBatch.ACTION_LOGP],
                versions=np.full(len(chunk), version),
                terminated=bool(chunk[SampleBatch.TERMINATEDS][-1]),
                truncated=bool(chunk[SampleBatch.TRUNCATEDS][-1]),
                episode_id=str(chunk[SampleBatch.EPS_ID][0]),
                first_step=int(chunk[SampleBatch.T][0]),
            )
        )
    return segments


def update_policy(
    policy: GePPOTorchPolicy, layout: dict, inputs: UpdateInputs, config: Any
) -> tuple[dict[str, Any], int]:
    """Targets under pi_k for the whole store (its ``layout``), then epochs x minibatches of
    gradient steps.

    Each epoch visits ``minibatches_per_epoch`` equal minibatches of a fresh permutation (the
    remainder, if any, sits the epoch out). Returns the losses and the policy's gradient norm,
    each the mean over the update's finite steps (as the new stack's learner reports them), with
    the update's policy change, and the number of samples updated on.
    """
    policy.begin_update(inputs)
    if inputs.obs_stats_before_update:
        policy.set_obs_stats(inputs.obs_mean, inputs.obs_std)
    batch = policy.compute_targets(layout, inputs)
    rows = len(batch)
    steps, size = minibatch_shape(rows, inputs.minibatches_per_epoch)
    sums = np.zeros(3)  # policy loss, value loss, policy grad norm over the finite steps
    for order in epoch_orders(
        rows,
        config.num_epochs,
        seed=inputs.shuffle_seed,
        shuffle=config.shuffle_batch_per_epoch,
        device=policy.device,
    ):
        for start in range(0, steps * size, size):
            minibatch = order[start : start + size]
            fetches = policy.learn_on_batch(SampleBatch({k: v[minibatch] for k, v in batch.items()}))
            if policy.last_step_finite:
                stats = fetches[LEARNER_STATS_KEY]
                sums += [
                    float(stats["policy_loss"]),
                    float(stats["vf_loss"]),
                    float(stats["policy_grad_norm"]),
                ]
    total = config.num_epochs * steps
    policy_loss, vf_loss, grad_norm = sums / max(total - policy.num_skipped_steps, 1)
    return {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "policy_grad_norm": grad_norm,
        **policy.policy_change_stats(batch),
        "num_skipped_steps": policy.num_skipped_steps,
        "num_gradient_steps": total,
    }, rows
