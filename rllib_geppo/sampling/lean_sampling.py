"""The EnvRunner's sampling loop for GePPO's own MLP Gaussian policy: RLlib's loop with the
forward pass and the sample in numpy, and nothing per step that nobody reads.

RLlib's ``SingleAgentEnvRunner._sample`` spends on every env step, beside the env itself, a
torch forward pass and a distribution object (about 160 us on one core for the paper's
network), a timer, two ``unbatch`` walks over the batch, gymnasium's ``DictInfoToList`` and an
``on_episode_step`` callback call per env. :class:`LeanSampling` keeps the loop and its
episodes (the same observations, actions, rewards, infos, extra model outputs, cuts and
callbacks) and changes only the costs:

- the actor is :func:`~rllib_geppo.sampling.numpy_actor.sample_actions` on the module's own
  parameters, with its noise drawn from the EnvRunner's generator (the draws the fused
  module-to-env pipeline makes), so actions equal the general loop's to float32 rounding;
- infos are converted per env by :func:`infos_as_list` (what ``DictInfoToList`` gives, faster);
- the inference timer is logged once per ``sample()`` call, as the env step timer is;
- ``on_episode_step`` runs only where a callback defines it (the default one does nothing).

It serves GePPO's own module with flat observations and Box actions on the CPU, sampling with
exploration through the fused pipelines (RLlib's default connectors). Anything else (a user's
connectors or module, discrete actions, images, greedy or random actions, a Ray where the
lean sampling path steps aside: :mod:`rllib_geppo.private_ray`)
takes RLlib's loop: :func:`lean_sampling_problem` says why, and ``sampling_path`` says which
loop ran last.
"""

from __future__ import annotations

import time

import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.columns import Columns
from ray.rllib.env.env_runner import ENV_STEP_FAILURE
from ray.rllib.utils.metrics import RLMODULE_INFERENCE_TIMER, WEIGHTS_SEQ_NO
from torch import nn

from rllib_geppo import private_ray
from rllib_geppo.rl_module.torch_rl_module import OBS_CLIP, GePPOTorchRLModule
from rllib_geppo.sampling.numpy_actor import ACTIVATIONS, NumpyGaussianMLP, sample_actions
from rllib_geppo.sampling.pipelines import LEAN_SAMPLING, FusedEnvToModulePipeline, FusedModuleToEnvPipeline

#: RLlib's internals the lean loop reads and overrides (see :mod:`rllib_geppo.private_ray`).
PRIVATE_RAY_NAMES = private_ray.LEAN_SAMPLING


def infos_as_list(infos: dict, num_envs: int) -> list[dict]:
    """A vector env's info dict as one dict per env, as gymnasium's ``DictInfoToList`` gives it
    (nested dicts too): key ``k`` goes to env ``i`` where the mask ``infos["_k"]`` is set, or to
    every env where there is no mask."""
    out: list[dict] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict):
            value = infos_as_list(value, num_envs)
        mask = infos.get("_" + key)
        for i, has_info in enumerate([True] * num_envs if mask is None else mask.tolist()):
            if has_info:
                out[i][key] = value[i]
    return out


def lean_sampling_problem(runner, *, explore: bool, random_actions: bool = False) -> str | None:
    """Why ``runner`` samples with RLlib's loop instead of :class:`LeanSampling`'s, or None."""
    module = runner.module
    if not LEAN_SAMPLING:
        return "RLlib's internals it reads are not those it was tested on (logged at import)"
    if random_actions or not explore:
        return "random actions" if random_actions else "explore=False (greedy actions)"
    if not isinstance(runner._env_to_module, FusedEnvToModulePipeline) or not isinstance(
        runner._module_to_env, FusedModuleToEnvPipeline
    ):
        return "the connectors are not RLlib's defaults"
    if type(module) is not GePPOTorchRLModule:
        return "the RLModule is not GePPO's own"
    if module.log_std is None or module.pi_encoder is not None:
        return "actions are not a Box" if module.log_std is None else "observations are images"
    if module.log_std.device.type != "cpu":
        return "the module is not on the CPU"
    if module.model_config.get("fcnet_activation", "tanh") not in ACTIVATIONS:
        return f"activation {module.model_config['fcnet_activation']!r} is not one of {sorted(ACTIVATIONS)}"
    return None


@torch.no_grad()
def numpy_policy(module: GePPOTorchRLModule) -> NumpyGaussianMLP:
    """The module's policy as numpy arrays; all but the log-std share memory with the module's
    parameters and buffers."""
    view = lambda t: t.detach().numpy()  # noqa: E731
    return NumpyGaussianMLP(
        layers=tuple((view(m.weight), view(m.bias)) for m in module.pi if isinstance(m, nn.Linear)),
        activation=module.model_config.get("fcnet_activation", "tanh"),
        obs_mean=view(module.obs_mean),
        obs_std=view(module.obs_std),
        obs_clip=OBS_CLIP,
        action_center=view(module.action_center),
        action_half_range=view(module.action_half_range),
        log_std=module.action_log_std().numpy(),
    )


def _defines(callbacks: list, config, hook: str) -> bool:
    """Whether any of the EnvRunner's callbacks does something at ``hook``."""
    base = getattr(RLlibCallback, hook)
    return bool(getattr(config, f"callbacks_{hook}", None)) or any(
        getattr(type(c), hook, base) is not base for c in callbacks
    )


class LeanSampling:
    """For a ``SingleAgentEnvRunner``: :meth:`_sample` takes the lean loop where it serves (see
    the module doc) and RLlib's otherwise; ``sampling_path`` is ``"lean"`` or ``"general"``."""

    #: False: always RLlib's loop (to compare the two, or to rule the lean one out).
    lean_sampling: bool = True
    sampling_path: str | None = None

    def _sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool,
        random_actions: bool = False,
        force_reset: bool = False,
    ):
        if not self.lean_sampling or lean_sampling_problem(
            self, explore=explore, random_actions=random_actions
        ):
            self.sampling_path = "general"
            return super()._sample(
                num_timesteps=num_timesteps,
                num_episodes=num_episodes,
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
        self.sampling_path = "lean"
        return self._sample_lean(
            num_timesteps=num_timesteps, num_episodes=num_episodes, force_reset=force_reset
        )

    def _sample_lean(self, *, num_timesteps: int | None, num_episodes: int | None, force_reset: bool):
        """RLlib's ``_sample`` loop with the numpy actor (see the module doc)."""
        ts = eps = 0
        done_episodes: list = []
        if force_reset or num_episodes is not None or self._needs_initial_reset:
            self._reset_envs_and_episodes(True)
        if num_episodes is not None:
            self._needs_initial_reset = True
        policy = numpy_policy(self.module)
        module_to_env, rng = self._module_to_env, self._module_to_env.rng
        noise_shape = (self.num_envs, *self.env.single_action_space.shape)
        step_callbacks = _defines(self._callbacks, self.config, "on_episode_step")
        obs = self._cached_to_module.pop(Columns.OBS).numpy()
        self._cached_to_module = None
        acting_seconds, acting_steps = 0.0, 0
        episodes = self._ongoing_episodes
        while (ts < num_timesteps) if num_timesteps is not None else (eps < num_episodes):
            start = time.perf_counter()
            noise = torch.randn(noise_shape, generator=rng).numpy()
            actions, logp, dist_inputs = sample_actions(policy, obs, noise)
            acting_seconds += time.perf_counter() - start
            acting_steps += 1
            results = self._try_env_step(module_to_env.actions_for_env(actions))
            if results is ENV_STEP_FAILURE:
                ts = 0
                self._reset_envs_and_episodes(True)
                obs = self._cached_to_module.pop(Columns.OBS).numpy()
                self._cached_to_module = None
                episodes = self._ongoing_episodes
                continue
            obs, rewards, terminateds, truncateds, infos = results
            started = []
            for i, episode in enumerate(episodes):
                if not episode.is_reset:
                    episode.add_env_reset(observation=obs[i], infos=infos[i])
                    started.append(i)
                    continue
                ts += 1
                episode.add_env_step(
                    observation=obs[i],
                    action=actions[i],
                    reward=rewards[i],
                    infos=infos[i],
                    terminated=terminateds[i],
                    truncated=truncateds[i],
                    extra_model_outputs={
                        Columns.ACTION_DIST_INPUTS: dist_inputs[i],
                        Columns.ACTION_LOGP: logp[i],
                        WEIGHTS_SEQ_NO: self._weights_seq_no,
                    },
                )
            for i in range(self.num_envs):
                if i in started:
                    self._make_on_episode_callback("on_episode_start", i, episodes)
                elif step_callbacks:
                    self._make_on_episode_callback("on_episode_step", i, episodes)
                if episodes[i].is_done:
                    eps += 1
                    self._make_on_episode_callback("on_episode_end", i, episodes)
                    done_episodes.append(episodes[i].to_numpy() if self.episodes_to_numpy else episodes[i])
                    self._new_episode(i, episodes)
                    if num_episodes is not None and eps >= num_episodes:
                        break
        # What the fused env-to-module pipeline gives for the latest observations.
        self._cached_to_module = self._env_to_module.from_observations(obs)
        if acting_steps:
            self.metrics.log_value(RLMODULE_INFERENCE_TIMER, acting_seconds / acting_steps, reduce="ema")
        return self._finish_sample(done_episodes, ts, cut=num_timesteps is not None)

    def _finish_sample(self, done_episodes: list, ts: int, *, cut: bool) -> list:
        """The end of RLlib's ``_sample``: the done episodes and, when sampling steps, the cut
        chunks of the ongoing ones (which go on in their continuations), with their metrics."""
        self._done_episodes_for_metrics.extend(done_episodes)
        ongoing = []
        if cut:
            continuations = [
                e.cut(len_lookback_buffer=self.config.episode_lookback_horizon)
                for e in self._ongoing_episodes
            ]
            for episode in self._ongoing_episodes:
                if episode.t == 0:  # just started: no data yet
                    continue
                episode.validate()
                self._ongoing_episodes_for_metrics[episode.id_].append(episode)
                ongoing.append(episode.to_numpy() if self.episodes_to_numpy else episode)
            self._ongoing_episodes = continuations
        self._log_env_steps(metric=self._metrics_num_env_steps_sampled, num_steps=ts)
        self._increase_sampled_metrics(ts, len(done_episodes))
        return done_episodes + ongoing
