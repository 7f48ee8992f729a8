"""The gradient clip, the finite check and the skippable Adam step (``rllib_geppo.core``)
against hand-derived values and torch's own ``Adam.step()``."""

import math

import pytest
import torch

from rllib_geppo.core.adam import adam_step_if
from rllib_geppo.core.gradients import clip_and_check, clip_gradients, clip_gradients_


def grads():
    return [torch.tensor([3.0, 0.0]), torch.tensor([[0.0, 4.0]])]  # global norm 5, per tensor 3 and 4


def test_global_norm_clip_scales_all_gradients_together():
    clipped, norm = clip_gradients(grads(), 1.0)
    assert float(norm) == pytest.approx(5.0)
    scale = 1.0 / (5.0 + 1e-6)
    torch.testing.assert_close(clipped[0], torch.tensor([3 * scale, 0.0]))
    torch.testing.assert_close(clipped[1], torch.tensor([[0.0, 4 * scale]]))


def test_per_tensor_and_value_clips_and_a_large_bound_changes_nothing():
    per_tensor, norm = clip_gradients(grads(), 2.0, "norm")
    assert float(norm) == pytest.approx(5.0)  # always the global norm before clipping
    torch.testing.assert_close(per_tensor[0], torch.tensor([2 * 3 / (3 + 1e-6), 0.0]))
    torch.testing.assert_close(per_tensor[1], torch.tensor([[0.0, 2 * 4 / (4 + 1e-6)]]))
    by_value, _ = clip_gradients(grads(), 3.5, "value")
    torch.testing.assert_close(by_value[1], torch.tensor([[0.0, 3.5]]))
    for unclipped in (clip_gradients(grads(), 10.0)[0], clip_gradients(grads(), None)[0]):
        for a, b in zip(unclipped, grads()):
            torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="clip_by"):
        clip_gradients(grads(), 1.0, "max")


def test_in_place_clip_writes_grad_and_skips_parameters_without_one():
    a, b, unused = (
        torch.nn.Parameter(torch.zeros(2)),
        torch.nn.Parameter(torch.zeros(1, 2)),
        torch.nn.Parameter(torch.zeros(3)),
    )
    a.grad, b.grad = grads()
    norm = clip_gradients_([a, b, unused], 1.0)
    assert float(norm) == pytest.approx(5.0)
    assert float(torch.linalg.vector_norm(torch.cat([a.grad, b.grad.flatten()]))) == pytest.approx(
        1.0, abs=1e-6
    )
    assert unused.grad is None


def test_clip_and_check_clips_the_policy_only_by_default_or_both_together():
    losses = (torch.tensor(0.5), torch.tensor(2.0))
    value = [torch.tensor([0.0, 12.0])]
    stats, finite, policy_grads, value_grads = clip_and_check(losses, grads(), value, grad_clip=1.0)
    torch.testing.assert_close(stats, torch.tensor([0.5, 2.0, 5.0]))
    assert bool(finite)
    torch.testing.assert_close(value_grads[0], value[0])  # the value function is never clipped
    assert float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in policy_grads]))) == pytest.approx(
        1.0, abs=1e-6
    )

    stats, _, policy_grads, value_grads = clip_and_check(losses, grads(), value, grad_clip=1.0, scope="all")
    assert float(stats[2]) == pytest.approx(13.0)  # sqrt(5^2 + 12^2): one norm over both
    torch.testing.assert_close(value_grads[0], torch.tensor([0.0, 12.0 / (13.0 + 1e-6)]))
    with pytest.raises(ValueError, match="scope"):
        clip_and_check(losses, grads(), value, grad_clip=1.0, scope="value")


@pytest.mark.parametrize("where", ["policy_loss", "value_grad"])
def test_a_non_finite_loss_or_gradient_fails_the_check(where):
    losses = (torch.tensor(math.nan if where == "policy_loss" else 0.5), torch.tensor(2.0))
    value = [torch.tensor([math.inf if where == "value_grad" else 0.0, 1.0])]
    _, finite, _, _ = clip_and_check(losses, grads(), value, grad_clip=1.0)
    assert not bool(finite)


def two_adams(**kwargs):
    """Two identical two-group Adams over identical parameters."""

    def build():
        torch.manual_seed(0)
        policy, value = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)
        optimizer = torch.optim.Adam(
            [{"params": policy.parameters(), "lr": 1e-2}, {"params": value.parameters(), "lr": 3e-3}],
            eps=1e-5,
            **kwargs,
        )
        return [*policy.parameters(), *value.parameters()], optimizer

    return build(), build()


def set_grads(params, seed):
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def test_fused_adam_step_equals_torchs_step_and_checkpoints_alike():
    (ours, our_adam), (torchs, torch_adam) = two_adams(fused=True)
    for seed in range(4):
        our_adam.param_groups[0]["lr"] *= 1.5  # the adaptive lr changes between steps
        torch_adam.param_groups[0]["lr"] *= 1.5
        set_grads(ours, seed)
        set_grads(torchs, seed)
        adam_step_if(our_adam, torch.tensor(True))
        torch_adam.step()
    for p, q in zip(ours, torchs):
        assert torch.equal(p, q)
    ours_state, torchs_state = our_adam.state_dict()["state"], torch_adam.state_dict()["state"]
    assert ours_state.keys() == torchs_state.keys()
    for i in ours_state:
        for name, tensor in torchs_state[i].items():
            assert torch.equal(ours_state[i][name], tensor) and ours_state[i][name].dtype == tensor.dtype


@pytest.mark.parametrize("kwargs", [{"fused": True}, {"foreach": True}])
def test_a_skipped_step_changes_no_weight_and_no_state(kwargs):
    (params, optimizer), _ = two_adams(**kwargs)
    set_grads(params, 0)
    adam_step_if(optimizer, torch.tensor(True))
    weights = [p.detach().clone() for p in params]
    state = [t.clone() for p in params for t in optimizer.state[p].values()]
    set_grads(params, 1)
    adam_step_if(optimizer, torch.tensor(False))
    assert all(torch.equal(p, w) for p, w in zip(params, weights))
    assert all(
        torch.equal(a, b) for a, b in zip((t for p in params for t in optimizer.state[p].values()), state)
    )
    assert all(float(optimizer.state[p]["step"]) == 1 for p in params)
