"""Atari games through EnvPool under Sample Factory's names, and Sample Factory's defaults for them.

EnvPool's `<Game>-v5` is the same game configuration as ale-py's `<Game>NoFrameskip-v4` (no sticky actions, the
minimal action set), with the whole wrapper stack of `sf_examples.atari` done in C++: no-op starts, action repeat
with the max of the last two frames, 84x84 grayscale, episodic life, FIRE after a reset, reward clipping and the
frame stack. Returns reported are the game's unclipped score over whole games, as on the gymnasium path.
"""

from __future__ import annotations

from typing import Any

from sf.envs.registry import register_vector_env
from sf.envs.vector import VectorConfig
from sf_examples.atari.atari_envs import ALE_MAX_FRAMES, ATARI_GAMES, MAX_FRAMES, atari_defaults, gym_id
from sf_examples.envpool.envpool_env import EnvPoolEnv, make_pool


def envpool_task(env_name: str) -> str:
    return gym_id(env_name).replace("NoFrameskip-v4", "-v5")


def make_envpool_atari(full_env_name: str, cfg: Any, config: VectorConfig) -> EnvPoolEnv:
    frameskip = int(cfg.env_frameskip)
    pool = make_pool(
        envpool_task(full_env_name),
        full_env_name,
        cfg,
        config,
        frame_skip=frameskip,
        stack_num=int(cfg.env_framestack),
        noop_max=30,
        img_height=84,
        img_width=84,
        gray_scale=True,
        episodic_life=True,
        use_fire_reset=True,
        reward_clip=True,
        repeat_action_probability=0.0,
        full_action_space=False,
        max_episode_steps=MAX_FRAMES.get(full_env_name, ALE_MAX_FRAMES) // frameskip,  # EnvPool counts agent steps
    )
    return EnvPoolEnv(pool, frameskip=frameskip)


def register_envpool_atari_envs() -> None:
    for name in ATARI_GAMES:
        register_vector_env(name, make_envpool_atari)


def envpool_atari_defaults(env_name: str) -> dict[str, Any]:
    """Sample Factory's EnvPool Atari defaults: the Atari ones, with 64 envs in each of 4 workers' pools, no input or
    return normalization, and asynchronous collection."""
    return {
        **atari_defaults(env_name),
        "envpool": True,
        "num_workers": 4,
        "num_envs_per_worker": 1,
        "env_agents": 64,
        "normalize_input": False,
        "normalize_returns": False,
        "async_rl": True,
    }
