"""V-trace GAE against hand-derived values and ordinary GAE."""

import math

import numpy as np
import pytest
import torch

from rllib_geppo.core.vtrace import backward_recurrence, vtrace_gae, vtrace_gae_padded, vtrace_gae_segments


def plain_gae(rewards, values, next_values, terminateds, gamma, lambda_):
    """Textbook GAE, written independently as a reference."""
    adv, last = np.zeros(len(rewards)), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * (1 - terminateds[t]) * next_values[t] - values[t]
        last = delta + gamma * lambda_ * last
        adv[t] = last
    return adv


def random_segment(length, seed):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(length + 1, generator=g, dtype=torch.float64)
    return dict(
        rewards=torch.randn(length, generator=g, dtype=torch.float64),
        values=values[:-1],
        next_values=values[1:],
        terminateds=torch.zeros(length, dtype=torch.float64),
        behaviour_logp=torch.randn(length, generator=g, dtype=torch.float64),
        target_logp=torch.randn(length, generator=g, dtype=torch.float64),
    )


def test_hand_derived_two_steps():
    # T = 2, gamma = 0.5, lambda = 1, c = [min(1, e^0), min(1, e^-ln2)] = [1, 0.5].
    # delta_1 = 1 + 0 - 2 = -1 (terminated), delta_0 = 1 + 0.5*2 - 1 = 1.
    # A_1 = -1; A_0 = 1 + 0.5*1*0.5*(-1) = 0.75; targets = V + c*A = [1.75, 1.5].
    adv, target = vtrace_gae(
        rewards=torch.tensor([1.0, 1.0]),
        values=torch.tensor([1.0, 2.0]),
        next_values=torch.tensor([2.0, 5.0]),
        terminateds=torch.tensor([0.0, 1.0]),
        behaviour_logp=torch.tensor([0.0, math.log(2.0)]),
        target_logp=torch.tensor([0.0, 0.0]),
        gamma=0.5,
        lambda_=1.0,
    )
    torch.testing.assert_close(adv, torch.tensor([0.75, -1.0]))
    torch.testing.assert_close(target, torch.tensor([1.75, 1.5]))


def test_ratio_above_clip_is_truncated():
    # c = min(1, e^1) = 1 on both steps: a larger pi_k than mu changes nothing beyond GAE.
    kwargs = dict(
        rewards=torch.tensor([0.0, 1.0]),
        values=torch.zeros(2),
        next_values=torch.zeros(2),
        terminateds=torch.tensor([0.0, 1.0]),
        gamma=0.9,
        lambda_=0.5,
    )
    adv, _ = vtrace_gae(behaviour_logp=torch.zeros(2), target_logp=torch.ones(2), **kwargs)
    torch.testing.assert_close(adv, torch.tensor([0.45, 1.0]))


def test_on_policy_equals_gae():
    seg = random_segment(50, seed=0)
    seg["target_logp"] = seg["behaviour_logp"]
    seg["terminateds"][-1] = 1.0
    adv, target = vtrace_gae(**seg, gamma=0.99, lambda_=0.95)
    expected = plain_gae(
        *(seg[k].numpy() for k in ("rewards", "values", "next_values", "terminateds")), 0.99, 0.95
    )
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-10)
    np.testing.assert_allclose(target.numpy(), expected + seg["values"].numpy(), atol=1e-10)


def test_segments_agree_with_one_dimensional_form():
    lengths = [7, 1, 30, 12]
    segs = [random_segment(n, seed=i) for i, n in enumerate(lengths)]
    for i, s in enumerate(segs):
        s["terminateds"][-1] = float(i % 2)
    flat = {k: torch.cat([s[k] for s in segs]) for k in segs[0]}
    adv, target = vtrace_gae_segments(**flat, lengths=lengths, gamma=0.995, lambda_=0.97, clip_c=1.0)
    ref = [vtrace_gae(**s, gamma=0.995, lambda_=0.97) for s in segs]
    torch.testing.assert_close(adv, torch.cat([r[0] for r in ref]), atol=1e-6, rtol=0)
    torch.testing.assert_close(target, torch.cat([r[1] for r in ref]), atol=1e-6, rtol=0)


def test_padded_keeps_dtype_and_ignores_zero_padding():
    seg = {k: v.float() for k, v in random_segment(5, seed=3).items()}
    padded = {k: torch.nn.functional.pad(v, (0, 3)).unsqueeze(0) for k, v in seg.items()}
    adv, _ = vtrace_gae_padded(**padded, gamma=0.9, lambda_=0.9)
    ref, _ = vtrace_gae(**seg, gamma=0.9, lambda_=0.9)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv[0, :5], ref)
    assert torch.all(adv[0, 5:] == 0)


def test_segment_lengths_must_cover_the_data():
    seg = random_segment(4, seed=1)
    with pytest.raises(ValueError, match="segment lengths sum to 3"):
        vtrace_gae_segments(**seg, lengths=[1, 2], gamma=0.9, lambda_=0.9)


@pytest.mark.parametrize("width", [1, 5, 31, 32, 33, 64, 1000])
def test_the_blocked_backward_recurrence_equals_the_column_by_column_one(width):
    g = torch.Generator().manual_seed(width)
    x = torch.randn(3, width, generator=g, dtype=torch.float64)
    a = torch.rand(3, width, generator=g, dtype=torch.float64) * 1.2  # above 1 too (c_bar > 1)
    a[1, width // 2] = 0.0  # a coefficient of zero cuts the recursion there
    expected, running = torch.empty_like(x), torch.zeros(3, dtype=torch.float64)
    for t in reversed(range(width)):
        running = x[:, t] + a[:, t] * running
        expected[:, t] = running
    torch.testing.assert_close(backward_recurrence(x, a, block=8), expected)
    torch.testing.assert_close(backward_recurrence(x, a), expected)
