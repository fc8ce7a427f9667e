"""Name -> factory registry, so entry points pick an env family by `--env` without importing it by hand.

A name may also have a vector factory (`register_vector_env`): one object stepping all of a rollout worker's envs
per call, which `--envpool=True` selects (`sf.envs.vector`).
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium
from gymnasium import error

from sf.envs.vector import VectorConfig, VectorEnv


@dataclass
class EnvConfig:
    """Where an env instance lives in the run; `env_id` is its global index, used for seeding."""

    worker_index: int = 0
    vector_index: int = 0
    env_id: int = 0


EnvFactory = Callable[[str, Any, "EnvConfig | None", "str | None"], gymnasium.Env]
VectorEnvFactory = Callable[[str, Any, VectorConfig], VectorEnv]


class EnvNotFoundError(ValueError):
    """No factory (or no gymnasium id) under the requested name."""


_REGISTRY: dict[str, EnvFactory] = {}
_UNKNOWN_ID_ERRORS = (error.NameNotFound, error.VersionNotFound, error.NamespaceNotFound, error.DeprecatedEnv)
_VECTOR_REGISTRY: dict[str, VectorEnvFactory] = {}
_SHM_NAMES: dict[str, tuple[str, ...]] = {}

CreateHook = Callable[[Callable[[], gymnasium.Env]], gymnasium.Env]
"""Called with the creation of an env (a function of no arguments) instead of it: it creates the env, around whatever
it measures, and returns it, wrapped if it likes. What a tool that follows the env's own calls (the cross-stack
breakdown) installs with `add_create_hook`; none is installed otherwise, and `create_env` calls the factory as is."""
_create_hooks: list[CreateHook] = []


def register_env(name: str, factory: EnvFactory, shm_names: tuple[str, ...] = ()) -> None:
    """Register (or replace) the factory called as `factory(name, cfg, env_config, render_mode)`. `shm_names`:
    glob patterns of the /dev/shm names the env's engines make (VizDoom's shared memory and message queues), so that
    a run killed while it starts such an env still removes them (`sf.supervision.shm_names`)."""
    _REGISTRY[name] = factory
    _SHM_NAMES[name] = tuple(shm_names)


def env_shm_names(name: str) -> tuple[str, ...]:
    """The /dev/shm name patterns registered with `name`'s factory."""
    return _SHM_NAMES.get(name, ())


def registered_envs() -> list[str]:
    return sorted(_REGISTRY)


def create_env(
    name: str, cfg: Any, env_config: EnvConfig | None = None, render_mode: str | None = None
) -> gymnasium.Env:
    factory = _REGISTRY.get(name) or _gymnasium_factory(name)
    if factory is None:
        raise EnvNotFoundError(_not_found_message(name))
    if not _create_hooks:
        return factory(name, cfg, env_config, render_mode)
    create = partial(factory, name, cfg, env_config, render_mode)
    for hook in _create_hooks:
        create = partial(hook, create)
    return create()


def add_create_hook(hook: CreateHook) -> None:
    _create_hooks.append(hook)


def remove_create_hook(hook: CreateHook) -> None:
    _create_hooks.remove(hook)


def register_vector_env(name: str, factory: VectorEnvFactory) -> None:
    """Register (or replace) the vector factory called as `factory(name, cfg, vector_config)`."""
    _VECTOR_REGISTRY[name] = factory


def create_vector_env(name: str, cfg: Any, config: VectorConfig) -> VectorEnv:
    factory = _VECTOR_REGISTRY.get(name)
    if factory is None:
        with_vector = sorted(_VECTOR_REGISTRY)
        offered = f"registered: {', '.join(with_vector[:8])}{', ...' if len(with_vector) > 8 else ''}"
        raise EnvNotFoundError(
            f"{name!r} has no EnvPool version ({offered if with_vector else 'the atari_* and mujoco_* families have'}"
            f"); leave --envpool out to step it one env at a time"
        )
    if not _create_hooks:
        return factory(name, cfg, config)
    create = partial(factory, name, cfg, config)
    for hook in _create_hooks:
        create = partial(hook, create)
    return create()


def make_gym_env(
    full_env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None
) -> gymnasium.Env:
    """The gym family's factory (`sf.envs.gym_family`): `gymnasium.make(id)`."""
    try:
        return gymnasium.make(full_env_name, render_mode=render_mode)
    except _UNKNOWN_ID_ERRORS as e:  # gymnasium's message carries its own "Did you mean" suggestion
        raise EnvNotFoundError(f"gymnasium does not know env id {full_env_name!r}: {e}") from e


def _gymnasium_factory(name: str) -> EnvFactory | None:
    """A gymnasium id nothing registered is made by gymnasium, as the gym family makes it: a script written for
    Sample Factory (`parse_full_cfg` then `run_rl`, `--env=CartPole-v1`) starts without a `register_env` call."""
    return make_gym_env if name in gymnasium.registry else None


def _not_found_message(name: str) -> str:
    names = registered_envs()
    close = difflib.get_close_matches(name, [*names, *gymnasium.registry], n=5, cutoff=0.5)
    if close:
        return f"no env registered as {name!r}; did you mean: {', '.join(close)}?"
    shown = _families_folded(names)
    listed = ", ".join(shown[:20]) + (", ..." if len(shown) > 20 else "")
    return (
        f"no env registered as {name!r} (registered: {listed or 'none'}), nor a gymnasium id; register it before "
        f"run_rl: register_env({name!r}, make_env) (from sf.envs.registry import register_env)"
    )


def _families_folded(names: list[str], more_than: int = 5) -> list[str]:
    """Sorted names, a family of more than `more_than` sharing a prefix (`atari_`) shown as `atari_* (57 envs)`."""
    shown: list[str] = []
    for prefix, group in itertools.groupby(names, key=lambda n: n.split("_", 1)[0] + "_" if "_" in n else n):
        members = list(group)
        shown += [f"{prefix}* ({len(members)} envs)"] if len(members) > more_than else members
    return shown


@dataclass(frozen=True)
class RegistrySnapshot:
    envs: dict[str, EnvFactory]
    vector_envs: dict[str, VectorEnvFactory]
    shm_names: dict[str, tuple[str, ...]] = field(default_factory=dict)


def registry_snapshot() -> RegistrySnapshot:
    """The registrations of this process, to hand to spawned processes (which start with an empty registry)."""
    return RegistrySnapshot(dict(_REGISTRY), dict(_VECTOR_REGISTRY), dict(_SHM_NAMES))


def restore_registry(snapshot: RegistrySnapshot) -> None:
    _REGISTRY.update(snapshot.envs)
    _VECTOR_REGISTRY.update(snapshot.vector_envs)
    _SHM_NAMES.update(snapshot.shm_names)
