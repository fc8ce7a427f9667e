"""Env layer: registry of env families, gymnasium space conversion, and the adapter the rollout loop steps; vector
envs (`vector`: EnvPool's families) and batched env objects of many copies (`batched`: `--batched_sampling`)."""

from sf.envs.adapter import EnvAdapter
from sf.envs.registry import EnvConfig, EnvNotFoundError, create_env, register_env, registered_envs
from sf.envs.spaces import UnsupportedSpaceError

__all__ = [
    "EnvAdapter",
    "EnvConfig",
    "EnvNotFoundError",
    "UnsupportedSpaceError",
    "create_env",
    "register_env",
    "registered_envs",
]
