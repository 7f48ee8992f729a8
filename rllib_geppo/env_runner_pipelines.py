"""The EnvRunners' connector pipelines, without RLlib's per-piece timers.

RLlib's ``ConnectorPipelineV2`` times every connector piece on every env step into the
EnvRunner's ``MetricsLogger`` (a timer, an EMA push, a NaN check and a regex on the class name
per piece): on Hopper-v5 with 64x64 networks that bookkeeping costs about a quarter of the
EnvRunner's time per step. The pipelines below run the same pieces, in the same order, with the
same arguments (``metrics`` included, so a piece that logs its own metrics still does); only the
timers and the pipelines' episode-length counters are gone. The EnvRunner still reports its
sampling time as a whole.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.env_to_module import EnvToModulePipeline
from ray.rllib.connectors.module_to_env import ModuleToEnvPipeline


class _Untimed:
    """``__call__`` of a pipeline: each piece in order on the previous piece's output."""

    connectors: list

    def __call__(self, *, rl_module, batch: dict | None = None, episodes, explore=None,
                 shared_data: dict | None = None, metrics=None, **kwargs) -> dict[str, Any]:
        batch = {} if batch is None else batch
        shared_data = {} if shared_data is None else shared_data
        for connector in self.connectors:
            batch = connector(rl_module=rl_module, batch=batch, episodes=episodes, explore=explore,
                              shared_data=shared_data, metrics=metrics, **kwargs)
            if not isinstance(batch, dict):
                raise ValueError(f"connector {connector} returned {type(batch).__name__}, not the "
                                 "batch dict. Fix: return the `batch` argument from its __call__.")
        return batch


class UntimedEnvToModulePipeline(_Untimed, EnvToModulePipeline):
    """RLlib's env-to-module pipeline, untimed."""


class UntimedModuleToEnvPipeline(_Untimed, ModuleToEnvPipeline):
    """RLlib's module-to-env pipeline, untimed."""


_UNTIMED = {EnvToModulePipeline: UntimedEnvToModulePipeline,
            ModuleToEnvPipeline: UntimedModuleToEnvPipeline}


def untimed(pipeline: ConnectorPipelineV2) -> ConnectorPipelineV2:
    """The untimed pipeline of the same connector pieces (the same objects) and input spaces.

    A pipeline of any other class (a user's own) is returned unchanged.
    """
    untimed_class = _UNTIMED.get(type(pipeline))
    if untimed_class is None:
        return pipeline
    return untimed_class(input_observation_space=pipeline.input_observation_space,
                         input_action_space=pipeline.input_action_space,
                         connectors=pipeline.connectors)
