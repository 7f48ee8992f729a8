"""Trajectory segments laid end to end: the form in which GePPO stores and trains on samples.

A *segment* is one chunk of one episode: T steps, the T + 1 observations around them, and how it
ended. Sampling cuts episodes at batch edges, so a segment ends in a termination (the episode is
over: no bootstrap), a time-limit truncation or a batch cut (both bootstrap from V(s_T)).

A *layout* is a dict of equal-length numpy columns (:class:`GePPOColumns` names) holding
segments end to end, each closed by one phantom row that carries s_T and is masked out of the
loss by ``LOSS_MASK``. Evaluating the critic on every row of a layout therefore gives, for each
real row t, V(s_{t+1}) in row t + 1. RLlib's learner pipeline lays out episodes the same way
(``AddOneTsToEpisodesAndTruncate``). Both API stacks build layouts from their own sample
formats; from there on the code is shared.

Pure numpy; no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rllib_geppo.core.columns import GePPOColumns as C


@dataclass
class Segment:
    """One chunk of one episode, as collected.

    Attributes:
        obs: ``[T + 1, ...]`` observations s_0 ... s_T.
        actions: ``[T, ...]`` actions as sampled (before any clipping to the action bounds).
        rewards: ``[T]``.
        behaviour_logp: ``[T]`` log mu(a_t|s_t) of the collecting policy.
        versions: ``[T]`` version of the collecting policy at each step.
        terminated: whether the episode terminated at s_T (no bootstrap from V(s_T)).
        truncated: whether the episode ended at s_T by a time limit (bootstrap from V(s_T)); a
            segment neither terminated nor truncated was cut at the end of a sample.
        episode_id: the episode's id, for messages and for carrying statistics across the
            segments of one episode.
        first_step: the episode's step index of row 0, for messages.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    behaviour_logp: np.ndarray
    versions: np.ndarray
    terminated: bool
    truncated: bool = False
    episode_id: str = ""
    first_step: int = 0

    def __len__(self) -> int:
        return len(self.rewards)


def lay_out(segments: Sequence[Segment]) -> dict[str, np.ndarray]:
    """Lay segments end to end, each closed by a phantom row holding s_T (see the module doc).

    Phantom rows repeat the segment's last action and version and hold zero reward and log-prob;
    nothing reads them but the critic's V(s_T). Each column is built with one concatenation
    over all segments (an update lays out the whole store).
    """
    if not segments:
        raise ValueError("no segments to lay out.")
    lengths = np.array([len(seg) for seg in segments])
    ends = np.cumsum(lengths)  # in the steps alone: where each segment's phantom row goes
    phantoms = ends + np.arange(len(segments))  # in the layout
    actions = _stored(np.concatenate([np.asarray(seg.actions) for seg in segments]))
    versions = np.concatenate([np.asarray(seg.versions) for seg in segments]).astype(np.int64)
    loss_mask = np.ones(int(ends[-1]) + len(segments), dtype=bool)
    loss_mask[phantoms] = False
    terminateds = np.zeros_like(loss_mask)
    terminateds[phantoms[[seg.terminated for seg in segments]] - 1] = True
    return {
        C.OBS: _stored(np.concatenate([np.asarray(seg.obs) for seg in segments])),
        C.ACTIONS: np.insert(actions, ends, actions[ends - 1], axis=0),
        C.REWARDS: np.insert(_floats(segments, "rewards"), ends, 0.0),
        C.TERMINATEDS: terminateds,
        C.BEHAVIOUR_LOGP: np.insert(_floats(segments, "behaviour_logp"), ends, 0.0),
        C.VERSION: np.insert(versions, ends, versions[ends - 1]),
        C.LOSS_MASK: loss_mask,
    }


def _floats(segments: Sequence[Segment], name: str) -> np.ndarray:
    return np.concatenate([np.asarray(getattr(seg, name)) for seg in segments]).astype(np.float32)


def join_episodes(segments: Sequence[Segment]) -> list[Segment]:
    """Join the consecutive chunks of each episode into one segment, so that V-trace runs on
    through a sampling cut instead of bootstrapping there.

    ``segments`` are in collection order (e.g. the store's, oldest batch first). A chunk joins
    the one before it when it has the same non-empty ``episode_id``, starts where that one was
    cut (neither terminated nor truncated, same episode step, same observation s_T), so how
    sampling was split (envs per EnvRunner, EnvRunners, fragment length) leaves the joined
    trajectories, and every advantage computed on them, the same. Each joined segment takes the
    place of its episode's first chunk.
    """
    chains: list[list[Segment]] = []
    open_chain: dict[str, list[Segment]] = {}  # episode id -> the chain it was last cut in
    for seg in segments:
        chain = open_chain.pop(seg.episode_id, None)
        if chain is not None and _continues(chain[-1], seg):
            chain.append(seg)
        else:
            chain = [seg]
            chains.append(chain)
        if seg.episode_id and not (seg.terminated or seg.truncated):
            open_chain[seg.episode_id] = chain
    return [chain[0] if len(chain) == 1 else _joined(chain) for chain in chains]


def _continues(first: Segment, then: Segment) -> bool:
    return then.first_step == first.first_step + len(first) and np.array_equal(
        np.asarray(first.obs[-1]), np.asarray(then.obs[0])
    )


def _joined(chain: Sequence[Segment]) -> Segment:
    """The chunks of one episode as one segment (each cut observation kept once)."""
    last = chain[-1]
    return Segment(
        obs=np.concatenate([np.asarray(s.obs)[:-1] for s in chain] + [np.asarray(last.obs)[-1:]]),
        actions=np.concatenate([np.asarray(s.actions) for s in chain]),
        rewards=np.concatenate([np.asarray(s.rewards) for s in chain]),
        behaviour_logp=np.concatenate([np.asarray(s.behaviour_logp) for s in chain]),
        versions=np.concatenate([np.asarray(s.versions) for s in chain]),
        terminated=last.terminated,
        truncated=last.truncated,
        episode_id=chain[0].episode_id,
        first_step=chain[0].first_step,
    )


def from_layout(layout: dict[str, np.ndarray]) -> list[Segment]:
    """The segments of a layout, without episode ids (they join nothing): reads stores
    checkpointed as layouts."""
    ends = np.flatnonzero(~layout[C.LOSS_MASK])  # phantom rows
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [
        Segment(
            obs=layout[C.OBS][a : b + 1],
            actions=layout[C.ACTIONS][a:b],
            rewards=layout[C.REWARDS][a:b],
            behaviour_logp=layout[C.BEHAVIOUR_LOGP][a:b],
            versions=layout[C.VERSION][a:b],
            terminated=bool(layout[C.TERMINATEDS][b - 1]),
        )
        for a, b in zip(starts, ends)
    ]


def _stored(values) -> np.ndarray:
    """Values as a layout stores them: floats as float32, anything else (image bytes, booleans,
    discrete actions) in its own dtype."""
    values = np.asarray(values)
    return values.astype(np.float32) if values.dtype.kind == "f" else values


def num_steps(layout: dict[str, np.ndarray]) -> int:
    """Real env steps in a layout (phantom rows excluded)."""
    return int(np.count_nonzero(layout[C.LOSS_MASK]))


def concatenate(layouts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One layout holding the segments of all ``layouts``, in order."""
    return {name: np.concatenate([layout[name] for layout in layouts]) for name in layouts[0]}


def describe_nonfinite(segment: Segment) -> str | None:
    """Where the first non-finite reward or observation of ``segment`` is, as stored, or None.

    Values are checked in the store's dtype (float32, see :func:`lay_out`), so a reward of 1e39,
    finite in float64 but infinite in float32, counts as infinite. Returns e.g. ``"reward = nan
    at env step 300"``, ``"reward = 1e+39 (beyond float32) at env step 5"`` or ``"observation
    index 2 = inf at env step 17"`` (steps counted from the start of the episode).
    """
    rewards = np.asarray(segment.rewards, dtype=np.float64)
    obs = np.asarray(segment.obs, dtype=np.float64).reshape(len(segment.obs), -1)
    with np.errstate(over="ignore"):
        bad_reward = np.flatnonzero(~np.isfinite(rewards.astype(np.float32)))
        bad_obs = np.argwhere(~np.isfinite(obs.astype(np.float32)))
    first_obs = int(bad_obs[0, 0]) if len(bad_obs) else None
    first_reward = int(bad_reward[0]) if len(bad_reward) else None
    if first_reward is None and first_obs is None:
        return None
    # Env step k (1-based; 0 is the reset) returns observation k and reward k - 1 of the
    # segment's rows: report whichever came first.
    if first_obs is not None and (first_reward is None or first_obs <= first_reward + 1):
        value = obs[first_obs, bad_obs[0, 1]]
        return (
            f"observation index {int(bad_obs[0, 1])} = {_as_stored(value)} at env step "
            f"{segment.first_step + first_obs}"
        )
    return f"reward = {_as_stored(rewards[first_reward])} at env step {segment.first_step + first_reward + 1}"


def _as_stored(value: float) -> str:
    """``value``, marked where only float32 makes it infinite."""
    return f"{value:g} (beyond float32)" if np.isfinite(value) else f"{value}"


def describe_largest_reward(segments: Sequence[Segment]) -> str:
    """Where the reward of largest magnitude in ``segments`` is: e.g. ``"reward = 1e+30 at env
    step 251 in episode 9af8..."`` (steps counted as in :func:`describe_nonfinite`)."""
    best, where = -1.0, ""
    for seg in segments:
        rewards = np.abs(np.asarray(seg.rewards, dtype=np.float64))
        if len(rewards) and rewards.max() > best:
            row = int(np.argmax(rewards))
            best = float(rewards[row])
            where = (
                f"reward = {float(seg.rewards[row]):g} at env step {seg.first_step + row + 1} "
                f"in episode {seg.episode_id}"
            )
    return where
