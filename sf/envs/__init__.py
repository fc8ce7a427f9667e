"""Env layer: registry of env families, gymnasium space conversion, and the adapter the rollout loop steps."""

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
