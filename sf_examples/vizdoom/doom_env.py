"""A headless `vizdoom.DoomGame` as a gymnasium env: discrete button combinations in, resized RGB frames out."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import gymnasium
import numpy as np
import vizdoom as vzd
from gymnasium import spaces

from sf_examples.vizdoom.resize import NearestResize

TICRATE = 35  # Doom's fixed game-time rate, in tics per second

# The engine renders this and the frame is resized to `res_w` x `res_h`. ViZDoom has no 16:9 mode
# smaller than 256x144 (it offers no 160x90), so the wide option renders 256x144: the engine widens
# the horizontal field of view for wide modes, so the agent sees more of the scene, at ~10-20% more
# render time than 160x120.
RENDER_RESOLUTION = vzd.ScreenResolution.RES_160X120
WIDE_RENDER_RESOLUTION = vzd.ScreenResolution.RES_256X144

_spawn_lock = threading.Lock()


@dataclass(frozen=True)
class DoomScenario:
    """One bundled scenario as an sf env: its .cfg, the button combinations the agent picks from, and episode rules.

    Each action is a tuple of button names pressed together (`()` is the no-op). The game's available
    buttons are set from the actions, so the scenario .cfg's own button list does not matter.
    """

    config_file: str
    actions: tuple[tuple[str, ...], ...]
    reward_scale: float  # the runtime multiplies the raw reward by this for training; returns stay raw
    timeout_tics: int  # episodes are truncated after this much game time (independent of frameskip)
    kill_reward: float = 0.0  # added for scenarios whose script rewards nothing on its own

    @property
    def buttons(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(button for action in self.actions for button in action))

    def button_vectors(self) -> list[list[float]]:
        """`make_action` input per action, built once so a step indexes a ready list."""
        buttons = self.buttons
        return [[float(button in action) for button in buttons] for action in self.actions]


@dataclass(frozen=True)
class DoomEnvOptions:
    """The run flags a Doom env reads (Sample Factory names); defaults apply where the cfg lacks a flag."""

    env_frameskip: int = 4
    res_w: int = 128
    res_h: int = 72
    wide_aspect_ratio: bool = False

    @classmethod
    def from_cfg(cls, cfg: Any) -> DoomEnvOptions:
        return cls(**{f.name: getattr(cfg, f.name, f.default) for f in fields(cls)})


@contextlib.contextmanager
def _working_directory(path: str) -> Iterator[None]:
    """The ViZDoom binary creates `./_vizdoom/` in the directory it starts in; start it in a private one.

    The lock keeps two threads of one process from interleaving their chdir calls.
    """
    with _spawn_lock:
        previous = os.getcwd()
        os.chdir(path)
        try:
            yield
        finally:
            os.chdir(previous)


class DoomEnv(gymnasium.Env):
    """One ViZDoom game process (`game`, public for reading game variables); `step` returns the raw scenario
    reward summed over `frameskip` tics."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": TICRATE}

    def __init__(
        self, scenario: DoomScenario, options: DoomEnvOptions = DoomEnvOptions(), render_mode: str | None = None
    ):
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r} is not supported; supported: None, 'rgb_array' (headless)")
        self.scenario = scenario
        self.render_mode = render_mode
        self.frameskip = int(options.env_frameskip)
        self.metadata = {**self.metadata, "render_fps": TICRATE / self.frameskip}  # real-time playback of steps
        self.reward_scale = scenario.reward_scale
        self._actions = scenario.button_vectors()
        self.action_space = spaces.Discrete(len(self._actions))
        self.observation_space = spaces.Box(0, 255, (3, options.res_h, options.res_w), np.uint8)

        self._workdir = tempfile.TemporaryDirectory(prefix="sf_vizdoom_", ignore_cleanup_errors=True)
        try:
            self.game = self._start_game(options.wide_aspect_ratio)
        except BaseException:
            self._workdir.cleanup()
            raise
        screen_hw = (self.game.get_screen_height(), self.game.get_screen_width())
        self._resize = NearestResize(screen_hw, (options.res_h, options.res_w))
        self._screen = np.zeros((3, *screen_hw), np.uint8)
        self._obs = np.zeros(self.observation_space.shape, np.uint8)

    def _start_game(self, wide: bool) -> vzd.DoomGame:
        game = vzd.DoomGame()
        game.load_config(os.path.join(vzd.scenarios_path, self.scenario.config_file))
        game.set_doom_config_path(os.path.join(self._workdir.name, "_vizdoom.ini"))
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_mode(vzd.Mode.PLAYER)
        game.set_screen_resolution(WIDE_RENDER_RESOLUTION if wide else RENDER_RESOLUTION)
        game.set_screen_format(vzd.ScreenFormat.CRCGCB)  # channel-first planes: no transpose per step
        game.set_available_buttons([getattr(vzd.Button, name) for name in self.scenario.buttons])
        game.set_episode_timeout(self.scenario.timeout_tics)
        if self.scenario.kill_reward:
            game.set_kill_reward(self.scenario.kill_reward)
        with _working_directory(self._workdir.name):
            game.init()
        return game

    def _observe(self) -> np.ndarray:
        self._screen = self.game.get_state().screen_buffer
        self._obs = self._resize(self._screen)
        return self._obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.game.set_seed(seed % 2**32)
        self.game.new_episode()
        return self._observe(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        game = self.game
        reward = game.make_action(self._actions[action], self.frameskip)
        if not game.is_episode_finished():
            return self._observe(), reward, False, False, {}
        truncated = game.is_episode_timeout_reached()
        return self._obs, reward, not truncated, truncated, {}  # no state after the end: repeat the last frame

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.ascontiguousarray(self._screen.transpose(1, 2, 0))

    def close(self) -> None:
        if self.game.is_running():
            self.game.close()
        self._workdir.cleanup()
