"""Any gymnasium id as an sf env: the generic family behind `sf_examples.train_gym_env`. Its factory,
`make_gym_env`, lives in the registry, which also makes a gymnasium id nothing registered with it."""

from __future__ import annotations

from sf.envs.registry import make_gym_env, register_env

__all__ = ["make_gym_env", "register_gym_env"]


def register_gym_env(gym_id: str) -> None:
    register_env(gym_id, make_gym_env)
