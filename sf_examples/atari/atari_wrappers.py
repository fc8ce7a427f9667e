"""The two Atari wrappers gymnasium and ale-py do not offer with the meaning the DQN-era setup gives them.

Everything else of that setup is gymnasium's own (`sf_examples.atari.atari_envs` puts the stack together):
`AtariPreprocessing` (no-op starts, action repeat with a max over the last two frames, 84x84 grayscale),
`TransformReward` (reward clipping), `RecordEpisodeStatistics` (the game's real score).

- Episodic life: gymnasium's `AtariPreprocessing(terminal_on_life_loss=True)` ends the episode on a lost life and
  its next `reset` starts a new game, so an agent would never see the later lives. Here a lost life ends the episode
  for the learner (no value is bootstrapped across it), and the next `reset` continues the same game.
- Fire reset: games that wait for FIRE before play starts (Breakout serves the ball on FIRE) get it pressed after
  every reset, as every Atari PPO setup does; gymnasium has no wrapper for it.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

FIRE, NOOP = 1, 0


class EpisodicLife(gymnasium.Wrapper):
    """A lost life is a terminal step; only the end of the game resets the emulator."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self._ale = env.unwrapped.ale
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self._ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:  # the game goes on with the next life: one no-op step moves past the lost life
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = self._ale.lives()
        return obs, info


class FireReset(gymnasium.Wrapper):
    """Press FIRE (then the action after it, as the original setup does) after every reset."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self.env.reset(seed=seed, options=options)
        for action in (FIRE, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        return obs, info


def has_fire_action(env: gymnasium.Env) -> bool:
    meanings = env.unwrapped.get_action_meanings()
    return len(meanings) >= 3 and meanings[FIRE] == "FIRE"
