"""Name -> factory registry, so entry points pick an env family by `--env` without importing it by hand."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium


@dataclass
class EnvConfig:
    """Where an env instance lives in the run; `env_id` is its global index, used for seeding."""

    worker_index: int = 0
    vector_index: int = 0
    env_id: int = 0


EnvFactory = Callable[[str, Any, "EnvConfig | None", "str | None"], gymnasium.Env]


class EnvNotFoundError(ValueError):
    """No factory (or no gymnasium id) under the requested name."""


_REGISTRY: dict[str, EnvFactory] = {}

CreateHook = Callable[[Callable[[], gymnasium.Env]], gymnasium.Env]
"""Called with the creation of an env (a function of no arguments) instead of it: it creates the env, around whatever
it measures, and returns it, wrapped if it likes. What a tool that follows the env's own calls (the cross-stack
breakdown) installs with `add_create_hook`; none is installed otherwise, and `create_env` calls the factory as is."""
_create_hooks: list[CreateHook] = []


def register_env(name: str, factory: EnvFactory) -> None:
    """Register (or replace) the factory called as `factory(name, cfg, env_config, render_mode)`."""
    _REGISTRY[name] = factory


def registered_envs() -> list[str]:
    return sorted(_REGISTRY)


def create_env(
    name: str, cfg: Any, env_config: EnvConfig | None = None, render_mode: str | None = None
) -> gymnasium.Env:
    factory = _REGISTRY.get(name)
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


def _not_found_message(name: str) -> str:
    names = registered_envs()
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    if close:
        return f"no env registered as {name!r}; did you mean: {', '.join(close)}?"
    listed = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return f"no env registered as {name!r}; registered: {listed or 'none'}"


def registry_snapshot() -> dict[str, EnvFactory]:
    """The registrations of this process, to hand to spawned processes (which start with an empty registry)."""
    return dict(_REGISTRY)


def restore_registry(snapshot: dict[str, EnvFactory]) -> None:
    _REGISTRY.update(snapshot)
