"""Any gymnasium id as an sf env: the generic family behind `sf_examples.train_gym_env`."""

from __future__ import annotations

from typing import Any

import gymnasium
from gymnasium import error

from sf.envs.registry import EnvConfig, EnvNotFoundError, register_env

_UNKNOWN_ID_ERRORS = (error.NameNotFound, error.VersionNotFound, error.NamespaceNotFound, error.DeprecatedEnv)


def make_gym_env(
    full_env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None
) -> gymnasium.Env:
    try:
        return gymnasium.make(full_env_name, render_mode=render_mode)
    except _UNKNOWN_ID_ERRORS as e:  # gymnasium's message carries its own "Did you mean" suggestion
        raise EnvNotFoundError(f"gymnasium does not know env id {full_env_name!r}: {e}") from e


def register_gym_env(gym_id: str) -> None:
    register_env(gym_id, make_gym_env)
