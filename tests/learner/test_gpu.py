"""The learner on a CUDA device: the same numbers as on the CPU, training with a GPU learner, and a
GPU checkpoint restored on a CPU-only setup. Skipped where no CUDA device exists (CI).

Run them with ``pytest -m gpu tests/learner/test_gpu.py`` on a machine with a GPU (the figures in
docs/results/scaling.md say where and when they last ran). ``GEPPO_TEST_DEVICE=cpu`` runs the
same code with the "GPU" learner on the CPU, to check the tests themselves on a CPU machine.
"""

import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPO, GePPOConfig
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.segments import Segment, lay_out
from rllib_geppo.core.update_inputs import UpdateInputs
from rllib_geppo.core.vtrace import vtrace_gae_segments
from rllib_geppo.learner.learner import OPTIMIZER

from helpers import METRICS

DEVICE = os.environ.get("GEPPO_TEST_DEVICE", "cuda")
GPUS = 1 if DEVICE == "cuda" else 0

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device (none found)"
    ),
]


def hopper_layout(seed: int = 0) -> dict:
    """Three Hopper-shaped chunks from three policy versions: terminated, truncated, cut."""
    rng = np.random.default_rng(seed)
    chunks = []
    for steps, terminated, version in ((40, True, 5), (64, False, 6), (23, False, 7)):
        chunks.append(
            Segment(
                obs=rng.normal(size=(steps + 1, 11)).astype(np.float32),
                actions=rng.uniform(-1.2, 1.2, size=(steps, 3)).astype(np.float32),
                rewards=rng.normal(1.0, 2.0, size=steps).astype(np.float32),
                behaviour_logp=rng.normal(-3.0, 0.5, size=steps).astype(np.float32),
                versions=np.full(steps, version),
                terminated=terminated,
            )
        )
    return lay_out(chunks)


INPUTS = UpdateInputs(
    policy_lr=3e-4,
    clip_eps=0.1,
    weights_by_version={5: 0.5, 6: 1.0, 7: 1.5},
    reward_scale=3.0,
    obs_mean=np.full(11, 0.1, np.float32),
    obs_std=np.full(11, 2.0, np.float32),
    minibatches_per_epoch=1,
    shuffle_seed=0,
)


def test_vtrace_on_cuda_equals_cpu():
    g = torch.Generator().manual_seed(0)
    args = {
        name: torch.randn(300, generator=g)
        for name in ("rewards", "values", "next_values", "behaviour_logp", "target_logp")
    }
    args["terminateds"] = torch.rand(300, generator=g) < 0.05
    lengths = [120, 80, 100]
    cpu = vtrace_gae_segments(**args, lengths=lengths, gamma=0.995, lambda_=0.97)
    gpu = vtrace_gae_segments(
        **{k: v.to(DEVICE) for k, v in args.items()}, lengths=lengths, gamma=0.995, lambda_=0.97
    )
    for ours, theirs in zip(gpu, cpu):
        assert ours.device.type == DEVICE
        torch.testing.assert_close(ours.cpu(), theirs, rtol=1e-5, atol=1e-5)


def test_targets_loss_and_gradients_on_cuda_equal_cpu(local_ray):
    env = gym.make("Hopper-v5")
    config = GePPOConfig().environment("Hopper-v5")
    cpu = config.build_learner(env=env)
    gpu = config.copy(copy_frozen=False).learners(num_gpus_per_learner=GPUS).build_learner(env=env)
    gpu.module[DEFAULT_MODULE_ID].load_state_dict(cpu.module[DEFAULT_MODULE_ID].state_dict())
    assert gpu._device.type == DEVICE
    layout = hopper_layout()

    on_cpu = cpu.prepare_update(DEFAULT_MODULE_ID, layout, INPUTS)
    on_gpu = gpu.prepare_update(DEFAULT_MODULE_ID, layout, INPUTS)
    for name, value in on_gpu.items():
        assert value.device.type == DEVICE, name  # every tensor of the update lives on the GPU
        torch.testing.assert_close(value.cpu(), on_cpu[name], rtol=1e-5, atol=1e-5, msg=name)

    losses = {}
    for name, learner, data in (("cpu", cpu, on_cpu), ("gpu", gpu, on_gpu)):
        policy_loss, vf_loss = learner.minibatch_losses(DEFAULT_MODULE_ID, data, INPUTS.clip_eps)
        (policy_loss + vf_loss).backward()
        losses[name] = (policy_loss.item(), vf_loss.item())
    assert losses["gpu"] == pytest.approx(losses["cpu"], rel=1e-5, abs=1e-6)
    cpu_params = dict(cpu.module[DEFAULT_MODULE_ID].named_parameters())
    for name, param in gpu.module[DEFAULT_MODULE_ID].named_parameters():
        torch.testing.assert_close(param.grad.cpu(), cpu_params[name].grad, rtol=1e-5, atol=1e-5, msg=name)


def test_compiled_step_on_cuda_equals_the_eager_cpu_step_and_skips_nan_on_the_device(local_ray):
    """``compile_learner=True`` on the GPU: the same losses and weights as the eager CPU
    learner over several steps, and a NaN step leaves weights and Adam state as they were."""
    env = gym.make("Hopper-v5")
    cpu = GePPOConfig().environment("Hopper-v5").training(compile_learner=False).build_learner(env=env)
    gpu = (
        GePPOConfig()
        .environment("Hopper-v5")
        .training(compile_learner=True)
        .learners(num_gpus_per_learner=GPUS)
        .build_learner(env=env)
    )
    gpu.module[DEFAULT_MODULE_ID].load_state_dict(cpu.module[DEFAULT_MODULE_ID].state_dict())
    data = {
        name: learner.prepare_update(DEFAULT_MODULE_ID, hopper_layout(), INPUTS)
        for name, learner in (("cpu", cpu), ("gpu", gpu))
    }
    for _ in range(5):
        (cpu_losses, _), (gpu_losses, gpu_finite) = (
            learner.minibatch_step(DEFAULT_MODULE_ID, data[name], INPUTS.clip_eps)
            for name, learner in (("cpu", cpu), ("gpu", gpu))
        )
        assert bool(gpu_finite) and gpu_losses.device.type == DEVICE
        torch.testing.assert_close(gpu_losses.cpu(), cpu_losses, rtol=1e-4, atol=1e-5)
    assert gpu.gradient_step(DEFAULT_MODULE_ID).compiled
    cpu_params = dict(cpu.module[DEFAULT_MODULE_ID].named_parameters())
    for name, param in gpu.module[DEFAULT_MODULE_ID].named_parameters():
        torch.testing.assert_close(
            param.detach().cpu(), cpu_params[name].detach(), rtol=1e-4, atol=1e-5, msg=name
        )

    params = [p.detach().clone() for p in gpu.module[DEFAULT_MODULE_ID].parameters()]
    optimizer = gpu.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER)
    state = [
        t.clone() for p in gpu.module[DEFAULT_MODULE_ID].parameters() for t in optimizer.state[p].values()
    ]
    data["gpu"][C.ADVANTAGES][3] = float("nan")
    _, finite = gpu.minibatch_step(DEFAULT_MODULE_ID, data["gpu"], INPUTS.clip_eps)
    assert not bool(finite)
    assert all(torch.equal(p, q) for p, q in zip(gpu.module[DEFAULT_MODULE_ID].parameters(), params))
    after = [t for p in gpu.module[DEFAULT_MODULE_ID].parameters() for t in optimizer.state[p].values()]
    assert all(torch.equal(a, b) for a, b in zip(after, state, strict=True))


def learner_module_state(algo: GePPO) -> dict:
    state = algo.learner_group.get_state(components=f"learner/rl_module/{DEFAULT_MODULE_ID}")
    return state["learner"]["rl_module"][DEFAULT_MODULE_ID]


def gpu_config() -> GePPOConfig:
    return (
        GePPOConfig()
        .environment("Hopper-v5")
        .env_runners(num_env_runners=2)
        .learners(num_learners=1, num_gpus_per_learner=GPUS)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=512)
    )


@pytest.fixture(scope="module")
def gpu_run(local_ray):
    algo = gpu_config().build_algo()
    results = [algo.train() for _ in range(3)]
    yield algo, results
    algo.stop()


def test_gpu_learner_trains_with_finite_metrics(gpu_run):
    algo, results = gpu_run
    for result in results:
        learner = result["learners"][DEFAULT_MODULE_ID]
        assert all(math.isfinite(learner[key]) for key in METRICS), learner
        assert learner["num_skipped_steps"] == 0
    # GePPO's defaults overlap sampling with the update: from the second update on, the batch
    # in flight joins the store after it.
    assert [r["learners"][DEFAULT_MODULE_ID]["sample_lag"] for r in results] == [0, 1, 1]
    assert [r["learners"][DEFAULT_MODULE_ID]["num_policies"] for r in results] == [1, 1, 2]


def test_every_update_tensor_lives_on_the_gpu(gpu_run):
    algo, _ = gpu_run
    layout, inputs = algo.module_state().store.update_layout(), algo.stores.update_inputs(DEFAULT_MODULE_ID)

    def devices(learner):
        data = learner.prepare_update(DEFAULT_MODULE_ID, layout, inputs)
        params = learner.module[DEFAULT_MODULE_ID].parameters()
        return {name: str(t.device) for name, t in data.items()} | {"params": str(next(params).device)}

    (found,) = [call.get() for call in algo.learner_group.foreach_learner(devices)]
    assert set(found.values()) == {"cuda:0" if DEVICE == "cuda" else "cpu"}, found
    assert C.ADVANTAGES in found and C.CENTER in found


def test_gpu_checkpoint_restores_on_cpu(gpu_run, tmp_path):
    algo, _ = gpu_run
    algo.save_to_path(str(tmp_path))
    cpu_algo = (
        gpu_config().learners(num_learners=0, num_gpus_per_learner=0).env_runners(num_env_runners=1)
    ).build_algo()
    try:
        cpu_algo.restore_from_path(str(tmp_path))
        ours, theirs = learner_module_state(cpu_algo), learner_module_state(algo)
        assert set(ours) == set(theirs) and "obs_mean" in ours and "vf.0.weight" in ours
        for key in theirs:
            np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(theirs[key]), rtol=1e-6)
        assert cpu_algo.module_state().policy_lr == algo.module_state().policy_lr
        assert [b.version for b in cpu_algo.module_state().store.batches] == [
            b.version for b in algo.module_state().store.batches
        ]
        result = cpu_algo.train()
        assert math.isfinite(result["learners"][DEFAULT_MODULE_ID]["tv"])
        assert cpu_algo.module_state().store.ages(cpu_algo.policy_version - 1)[:2] == [0, 1]
    finally:
        cpu_algo.stop()
