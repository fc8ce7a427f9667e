"""Which example family trains an env, and how to build its config in this process.

The benchmark runs training as a user would (`python -m <family module> ...`), but it also needs the resolved
config itself: to reject a bad flag before anything starts and to create the same envs for the ceiling.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sf.cfg.arguments import parse_full_cfg


def _attr(spec: str | None) -> Any:
    """`module:name` -> the object; None stays None."""
    if spec is None:
        return None
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Family:
    prefix: str  # env names starting with this belong to the family ("" matches any gymnasium id)
    train_module: str
    register: str  # `module:function`, called with the env name when `register_takes_env`, else without arguments
    register_takes_env: bool
    defaults: str | None = None
    add_args: str | None = None

    def register_envs(self, env: str) -> None:
        fn: Callable[..., None] = _attr(self.register)
        fn(env) if self.register_takes_env else fn()

    def parse_cfg(self, argv: list[str]) -> argparse.Namespace:
        """The config the training module would build from `argv` (raises ConfigError on a bad flag)."""
        cfg = parse_full_cfg(argv, add_args=_attr(self.add_args), defaults=_attr(self.defaults))
        self.register_envs(cfg.env)
        return cfg


FAMILIES: tuple[Family, ...] = (
    Family(
        "doom_",
        "sf_examples.vizdoom.train_vizdoom",
        "sf_examples.vizdoom.doom_envs:register_doom_envs",
        False,
        defaults="sf_examples.vizdoom.doom_envs:doom_defaults",
        add_args="sf_examples.vizdoom.doom_envs:add_doom_args",
    ),
    Family(
        "mujoco_",
        "sf_examples.mujoco.train_mujoco",
        "sf_examples.mujoco.mujoco_envs:register_mujoco_envs",
        False,
        defaults="sf_examples.mujoco.mujoco_envs:mujoco_defaults",
    ),
    Family(
        "atari_",
        "sf_examples.atari.train_atari",
        "sf_examples.atari.atari_envs:register_atari_envs",
        False,
        defaults="sf_examples.atari.atari_envs:atari_defaults",
    ),
    Family(
        "",
        "sf_examples.train_gym_env",
        "sf.envs.gym_family:register_gym_env",
        True,
        defaults="sf_examples.train_gym_env:gym_defaults",
    ),
)


def family_of(env: str) -> Family:
    return next(f for f in FAMILIES if env.startswith(f.prefix))
