"""The type names a model or env written for Sample Factory annotates with (`sample_factory.utils.typing`), every one
of them, so its imports change and nothing else: aliases for annotations, no classes of their own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium import spaces

Config = Any  # the resolved flags: an argparse.Namespace from the parser, any namespace in tests and libraries
StatusCode = int  # a run's exit status (`sf.train.ExperimentStatus`)
PolicyID = int
Device = str  # "cpu", "gpu", "cuda:1"
MpQueue = Any  # a queue between processes, or its stand-in in serial mode
MpLock = Any
Env = Any  # a gymnasium.Env, a multi-agent env (`num_agents`) or a batched env that steps tensors
ObsSpace = spaces.Space
ActionSpace = spaces.Space
CreateEnvFunc = Callable[[str, Config | None, Any, str | None], Env]  # (name, cfg, env_config, render_mode)
ActionDistribution = Any  # sf.model.distributions' categorical, Gaussian or tuple distribution
InitModelData = tuple[PolicyID, dict, Any, int]  # (policy, model state, torch.device, policy version)
