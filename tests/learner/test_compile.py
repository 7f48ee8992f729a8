"""The compiled minibatch step (``compile_learner=True``: gradients by ``torch.func``, clip and
finite check in one compiled graph) against the eager one (``loss.backward()``), on real RLlib
learners: the same losses, gradients, weights and Adam state over many steps, with the lr and
the clip range changing between updates, minibatch sizes changing, across a checkpoint restore
and through the non-finite guard, all on one compiled graph. Compiling costs seconds to tens of
seconds on 2 cores, so one compiled learner serves every test of the module."""

import functools
import logging

import gymnasium as gym
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig
from rllib_geppo.core import compiled_step
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.compiled_step import (
    AUTO_COMPILE_AFTER_STEPS,
    CompiledStep,
    losses_and_gradients,
    resolve_compile,
)
from rllib_geppo.learner.learner import OPTIMIZER

from helpers import update_inputs

TOL = 1e-5


def build_learner(compile_learner):
    env = gym.make("Pendulum-v1")
    return (
        GePPOConfig()
        .environment("Pendulum-v1")
        .training(compile_learner=compile_learner)
        .build_learner(env=env)
    )


@pytest.fixture(scope="module")
def learners():
    """A compiled and an eager learner; each test starts them from the same state. Dynamo
    raises on any recompile, which leaves the compiled step eager for good: a test that ends
    with its step still compiled ran on one graph."""
    compiled, eager = build_learner(True), build_learner(False)
    assert not eager.gradient_step(DEFAULT_MODULE_ID).compiled
    torch._dynamo.reset()  # steps compiled by earlier tests of this process share its caches
    with torch._dynamo.config.patch(error_on_recompile=True):
        yield compiled, eager


def on_one_graph(learner) -> bool:
    return learner.gradient_step(DEFAULT_MODULE_ID).how == "compiled"


def same_start(compiled, eager) -> None:
    """The eager learner takes the compiled one's weights and Adam state."""
    eager.set_state(compiled.get_state())


def minibatch(rows: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        C.OBS: torch.randn(rows, 3, generator=g),
        C.ACTIONS: 2 * torch.randn(rows, 1, generator=g),
        C.BEHAVIOUR_LOGP: torch.randn(rows, generator=g) - 1.5,
        C.CENTER: torch.exp(0.1 * torch.randn(rows, generator=g)),
        C.ADVANTAGES: torch.randn(rows, generator=g),
        C.VALUE_TARGETS: torch.randn(rows, generator=g),
        C.SAMPLE_WEIGHTS: torch.rand(rows, generator=g) + 0.5,
    }


def parameters(learner) -> list[torch.nn.Parameter]:
    return list(learner.module[DEFAULT_MODULE_ID].parameters())


def adam_state(learner) -> list[torch.Tensor]:
    optimizer = learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER)
    return [tensor.clone() for p in parameters(learner) for tensor in optimizer.state[p].values()]


def set_policy_lr(learner, lr: float) -> None:
    learner.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER).param_groups[0]["lr"] = lr


def assert_same(compiled, eager) -> None:
    for p, q in zip(parameters(compiled), parameters(eager)):
        torch.testing.assert_close(p, q, atol=TOL, rtol=TOL)
        torch.testing.assert_close(p.grad, q.grad, atol=TOL, rtol=TOL)
    for a, b in zip(adam_state(compiled), adam_state(eager), strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=TOL)


def run_steps(learners, steps: range) -> list[torch.Tensor]:
    """The same minibatch steps on both learners, the lr and clip range changing every 5 steps
    and the minibatch size every 7 (as the store grows); asserts agreement after each step."""
    compiled, eager = learners
    losses = []
    for i in steps:
        lr, clip_eps = 3e-4 * 1.03 ** (i // 5), 0.1 + 0.01 * (i // 5)
        set_policy_lr(compiled, lr)
        set_policy_lr(eager, lr)
        batch = minibatch(32 + 16 * (i // 7), seed=i)
        compiled_losses, compiled_finite = compiled.minibatch_step(DEFAULT_MODULE_ID, batch, clip_eps)
        eager_losses, eager_finite = eager.minibatch_step(DEFAULT_MODULE_ID, batch, clip_eps)
        assert bool(compiled_finite) and bool(eager_finite)
        torch.testing.assert_close(compiled_losses, eager_losses, atol=TOL, rtol=TOL)
        assert_same(compiled, eager)
        losses.append(compiled_losses)
    return losses


def test_compiled_and_eager_steps_agree_over_many_steps_without_recompiling(learners):
    compiled, eager = learners
    same_start(compiled, eager)
    run_steps(learners, range(20))
    assert compiled.gradient_step(DEFAULT_MODULE_ID).compile_seconds > 0
    assert on_one_graph(compiled)  # 4 lrs, 4 clip ranges, 3 minibatch sizes: one graph


def test_an_update_agrees_too(learners):
    """``run_epochs``, as every update runs it: shuffles, the clip range as a tensor, metrics."""
    compiled, eager = learners
    same_start(compiled, eager)
    data = minibatch(256, seed=99)
    inputs = update_inputs(3, policy_lr=2e-4, clip_eps=0.07, minibatches_per_epoch=4, shuffle_seed=5)
    results = []
    for learner in learners:
        results.append(learner.run_epochs(DEFAULT_MODULE_ID, data, inputs))  # the same shuffles
    (compiled_stats, compiled_steps), (eager_stats, eager_steps) = results
    assert compiled_steps == eager_steps
    assert compiled_stats == pytest.approx(eager_stats, rel=TOL, abs=TOL)
    assert_same(compiled, eager)
    assert on_one_graph(compiled)


def test_restored_checkpoint_trains_the_same(learners, tmp_path):
    """A checkpoint restored into the compiled learner continues exactly as before the save,
    and as the eager learner restored from it, on the same compiled graph."""
    compiled, eager = learners
    same_start(compiled, eager)
    run_steps(learners, range(3))
    compiled.save_to_path(tmp_path / "learner")
    before = run_steps(learners, range(3, 8))
    compiled.restore_from_path(tmp_path / "learner")
    eager.restore_from_path(tmp_path / "learner")
    after = run_steps(learners, range(3, 8))
    for a, b in zip(before, after):
        torch.testing.assert_close(a, b, atol=TOL, rtol=TOL)
    assert on_one_graph(compiled)


@pytest.mark.parametrize("column", [C.ADVANTAGES, C.OBS])
def test_guard_skips_a_nan_step_in_the_compiled_learner(learners, column):
    compiled, _ = learners
    run_steps(learners, range(1))  # Adam has state to keep
    weights = [p.detach().clone() for p in parameters(compiled)]
    state = adam_state(compiled)
    batch = minibatch(32, seed=7)
    batch[column][3] = float("nan")
    _, finite = compiled.minibatch_step(DEFAULT_MODULE_ID, batch, 0.1)
    assert not bool(finite)
    for p, w in zip(parameters(compiled), weights):
        assert torch.equal(p, w)
    for a, b in zip(adam_state(compiled), state, strict=True):
        assert torch.equal(a, b)
    assert on_one_graph(compiled)


def weighted_sum_step():
    """A tiny step in both forms: ``(losses, gradient)`` of ``sum(w * x)`` and ``sum(w^2 * x)``."""
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))

    def losses(params, x):
        return (params["w"] * x).sum(), (params["w"] ** 2 * x).sum()

    def functional(x):
        losses_, grads = losses_and_gradients(losses, {"w": weight}, x)
        return torch.stack(losses_), grads["w"]

    def eager(x):
        weight.grad = None
        losses_ = losses({"w": weight}, x)
        sum(losses_).backward()
        return torch.stack(losses_).detach(), weight.grad

    return weight, functional, eager


NO_C_COMPILER = {"cpp.cxx": ("no-such-c-compiler",), "fx_graph_cache": False}


@pytest.mark.parametrize("via", ["inductor config", "the step's inductor_options"])
def test_a_failed_compile_falls_back_to_eager_with_one_warning(caplog, via):
    """No C compiler (a name that does not exist, inductor's cache off), set in inductor's
    config or in the step's own options (which so reach inductor): one warning, then the eager
    result, on this call and the next."""
    weight, functional, eager = weighted_sum_step()
    options = NO_C_COMPILER if via.startswith("the step") else None
    step = CompiledStep(functional, eager, compile_after=0, name="test step", inductor_options=options)
    x = torch.tensor([0.5, 1.5, -1.0])
    config = torch._inductor.config.patch(NO_C_COMPILER if options is None else {})
    with caplog.at_level(logging.WARNING, logger=compiled_step.__name__), config:
        for _ in range(2):
            losses, grad = step(x)
            torch.testing.assert_close(
                losses, torch.stack([(weight * x).sum(), (weight**2 * x).sum()]).detach()
            )
            torch.testing.assert_close(grad, x + 2 * weight.detach() * x)
    assert not step.compiled
    warnings = [r.getMessage() for r in caplog.records if r.name == compiled_step.__name__]
    assert len(warnings) == 1 and warnings[0].startswith("Could not compile GePPO's test step")


def test_functional_gradients_match_backward_and_compile_after_the_eager_calls():
    weight, functional, eager = weighted_sum_step()
    x = torch.tensor([0.5, 1.5, -1.0])
    torch.testing.assert_close(functional(x), eager(x))
    step = CompiledStep(functional, eager, compile_after=2, name="test step")
    for expect_compiled in (False, False, True, True):
        assert step.compiled is expect_compiled
        losses, grad = step(x)
        torch.testing.assert_close(grad, x + 2 * weight.detach() * x)
    assert step.how == "compiled" and step.compile_seconds > 0


def test_the_steps_of_more_modules_than_dynamos_cache_cap_all_compile():
    """One function, one step per module (as the learner's, the module id bound in): each
    step's compile adds a cache entry, and dynamo caps them at recompile_limit."""

    def step_of(module_id: str, x: torch.Tensor) -> torch.Tensor:
        return (x * len(module_id)).sin().sum()

    modules = [f"agent_{i}" for i in range(torch._dynamo.config.recompile_limit + 2)]
    torch._dynamo.config.error_on_recompile = False  # the module's learners' guard: not here
    steps = [
        CompiledStep(functools.partial(step_of, m), functools.partial(step_of, m), compile_after=0)
        for m in modules
    ]
    x = torch.randn(4)
    for module_id, step in zip(modules, steps):
        torch.testing.assert_close(step(x), step_of(module_id, x))
    assert all(step.how == "compiled" for step in steps)


def test_auto_compiles_later_and_bad_values_are_named():
    assert resolve_compile("auto") == AUTO_COMPILE_AFTER_STEPS
    assert resolve_compile(True) == 0
    assert resolve_compile(False) is None
    with pytest.raises(ValueError, match="compile_learner"):
        GePPOConfig().environment("Pendulum-v1").training(compile_learner="yes").validate()
    with pytest.raises(ValueError, match="compile_learner"):
        GePPOConfig().environment("Pendulum-v1").training(compile_learner=1).validate()
    with pytest.raises(ValueError, match="compile_learner=True` runs on the new API stack only"):
        (
            GePPOConfig()
            .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
            .environment("Pendulum-v1")
            .training(compile_learner=True)
            .validate()
        )
