"""The env families sf ships, in one table: which env names each one trains, and the example modules that train,
evaluate and set it up.

The example scripts build their config through their family (`family_named("vizdoom").cfg_or_exit(argv)`); the
benchmark (`python -m sf.benchmark --env=...`) and the cross-stack breakdown find the family of an `--env` with
`family_of`, to run its training module as a user would and to build the same config in their own process.
A family's code lives in `sf_examples` and is named here by module path, imported only when the family is used, so a
family whose simulator is not installed costs the others nothing. Another package adds its families with
`register_family`.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sf.cfg.arguments import AddArgs, main_cfg_or_exit, parse_full_cfg


def _load(spec: str | None) -> Any:
    """`module:name` -> the object; None stays None."""
    if spec is None:
        return None
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class EnvFamily:
    name: str
    prefix: str
    """Env names starting with this belong to the family; "" (the gymnasium family) takes any other name."""
    train_module: str
    """`python -m <train_module> --env=<name> ...` trains."""
    enjoy_module: str | None
    """`python -m <enjoy_module> --env=<name> --experiment=...` evaluates; None where the family has none."""
    register: str
    """`module:function` registering the family's envs: called with the env name when `register_takes_env`."""
    register_takes_env: bool = False
    register_vector: str | None = None
    """`module:function` registering the family's vector envs (EnvPool's, for `--envpool=True`), called after."""
    defaults: str | None = None
    """`module:function`, env name -> the family's flag defaults (below YAML and the command line)."""
    add_args: str | None = None
    """`module:function` adding the family's own flags to the parser."""

    def register_envs(self, env: str) -> None:
        fn: Callable[..., None] = _load(self.register)
        fn(env) if self.register_takes_env else fn()
        if self.register_vector is not None:
            _load(self.register_vector)()

    def parse_cfg(self, argv: list[str], evaluation: bool = False) -> argparse.Namespace:
        """The config the family's script builds from `argv`, its envs registered; raises ConfigError on a bad flag."""
        cfg = parse_full_cfg(argv, add_args=_load(self.add_args), defaults=_load(self.defaults), evaluation=evaluation)
        self.register_envs(cfg.env)
        return cfg

    def cfg_or_exit(
        self, argv: list[str] | None, evaluation: bool = False, add_args: AddArgs | None = None
    ) -> argparse.Namespace:
        """`parse_cfg` for the family's scripts: a bad flag prints `sf: error: ...` and exits with status 2.
        `add_args` adds a tool's own flags beside the family's (`sf.export_onnx`'s `--onnx_path`)."""
        family_args = _load(self.add_args)

        def both(parser: argparse.ArgumentParser) -> None:
            for add in (family_args, add_args):
                if add is not None:
                    add(parser)

        cfg = main_cfg_or_exit(argv, add_args=both, defaults=_load(self.defaults), evaluation=evaluation)
        self.register_envs(cfg.env)
        return cfg


_FAMILIES: dict[str, EnvFamily] = {
    family.name: family
    for family in (
        EnvFamily(
            "vizdoom",
            "doom_",
            "sf_examples.vizdoom.train_vizdoom",
            "sf_examples.vizdoom.enjoy_vizdoom",
            "sf_examples.vizdoom.doom_envs:register_doom_envs",
            defaults="sf_examples.vizdoom.doom_envs:doom_defaults",
            add_args="sf_examples.vizdoom.doom_envs:add_doom_args",
        ),
        EnvFamily(
            "mujoco",
            "mujoco_",
            "sf_examples.mujoco.train_mujoco",
            "sf_examples.mujoco.enjoy_mujoco",
            "sf_examples.mujoco.mujoco_envs:register_mujoco_envs",
            register_vector="sf_examples.envpool.mujoco.envpool_mujoco:register_envpool_mujoco_envs",
            defaults="sf_examples.mujoco.mujoco_envs:mujoco_defaults",
        ),
        EnvFamily(
            "atari",
            "atari_",
            "sf_examples.atari.train_atari",
            "sf_examples.atari.enjoy_atari",
            "sf_examples.atari.atari_envs:register_atari_envs",
            register_vector="sf_examples.envpool.atari.envpool_atari:register_envpool_atari_envs",
            defaults="sf_examples.atari.atari_envs:atari_defaults",
        ),
        EnvFamily(
            "tensor_envs",
            "tensor_",
            "sf_examples.tensor_envs.train_tensor_env",
            "sf_examples.tensor_envs.enjoy_tensor_env",
            "sf_examples.tensor_envs.tensor_envs:register_tensor_envs",
            defaults="sf_examples.tensor_envs.tensor_envs:tensor_env_defaults",
            add_args="sf_examples.tensor_envs.tensor_envs:add_tensor_env_args",
        ),
        EnvFamily(
            "brax",
            "brax_",
            "sf_examples.brax.train_brax",
            "sf_examples.brax.enjoy_brax",
            "sf_examples.brax.brax_envs:register_brax_envs",
            defaults="sf_examples.brax.brax_envs:brax_defaults",
            add_args="sf_examples.brax.brax_envs:add_brax_args",
        ),
        EnvFamily(
            "custom_env",
            "goal_gate",
            "sf_examples.custom_env.train_custom_env",
            None,
            "sf_examples.custom_env.train_custom_env:register_custom_envs",
        ),
        EnvFamily(
            "multi_agent",
            "cooperative_cue",
            "sf_examples.multi_agent.train_multi_agent",
            None,
            "sf_examples.multi_agent.train_multi_agent:register_multi_agent_envs",
            defaults="sf_examples.multi_agent.train_multi_agent:cooperative_cue_defaults",
        ),
        EnvFamily(
            "self_play",
            "cue_duel",
            "sf_examples.multi_agent.train_multi_agent",
            None,
            "sf_examples.multi_agent.train_multi_agent:register_multi_agent_envs",
            defaults="sf_examples.multi_agent.train_multi_agent:cooperative_cue_defaults",
        ),
        EnvFamily(
            "pettingzoo",
            "pettingzoo:",
            "sf_examples.pettingzoo.train_pettingzoo",
            None,
            "sf.envs.pettingzoo_env:register_pettingzoo_module",
            register_takes_env=True,
            defaults="sf.envs.pettingzoo_env:pettingzoo_defaults",
            add_args="sf.envs.pettingzoo_env:add_pettingzoo_args",
        ),
        EnvFamily(
            "custom_model",
            "collect",
            "sf_examples.custom_model.train_custom_model",
            "sf_examples.custom_model.enjoy_custom_model",
            "sf_examples.custom_model.train_custom_model:register_custom_components",
            defaults="sf_examples.custom_model.train_custom_model:custom_model_defaults",
            add_args="sf_examples.custom_model.train_custom_model:add_custom_model_args",
        ),
        EnvFamily(
            "sleepy",
            "sleepy_cartpole_",
            "sf_examples.profiling.sleepy_env",
            None,
            "sf_examples.profiling.sleepy_env:register_sleepy_env",
            register_takes_env=True,
            defaults="sf_examples.profiling.sleepy_env:sleepy_defaults",
        ),
        EnvFamily(
            "gym",
            "",
            "sf_examples.train_gym_env",
            "sf_examples.enjoy_gym_env",
            "sf.envs.gym_family:register_gym_env",
            register_takes_env=True,
            defaults="sf_examples.train_gym_env:gym_defaults",
        ),
    )
}


def register_family(family: EnvFamily) -> None:
    """Add a family, or replace the one of the same name."""
    _FAMILIES[family.name] = family


def families() -> list[EnvFamily]:
    return list(_FAMILIES.values())


def family_of(env: str) -> EnvFamily:
    """The family with the longest prefix `env` starts with: the gymnasium family ("") when no other matches."""
    return max((f for f in _FAMILIES.values() if env.startswith(f.prefix)), key=lambda f: len(f.prefix))


def family_named(name: str) -> EnvFamily:
    return _FAMILIES[name]


def env_in_argv(argv: list[str]) -> str | None:
    """The value of `--env` on a command line (`--env=X` or `--env X`), None without one."""
    for i, token in enumerate(argv):
        if token.startswith("--env="):
            return token.split("=", 1)[1]
        if token == "--env" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def family_of_argv(argv: list[str]) -> EnvFamily:
    """The family of the command line's `--env` (the gymnasium family without one, whose parser still answers
    `--help` and names a missing `--env`)."""
    return family_of(env_in_argv(argv) or "")
