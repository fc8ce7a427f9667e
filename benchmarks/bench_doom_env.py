"""Per-step cost of DoomEnv (and EnvAdapter over it) against driving the same `vizdoom.DoomGame` by hand.

The raw loop does the least any agent must: `make_action` with frameskip, then fetch the screen buffer.
The difference is what the env adds per step: resizing, episode-end bookkeeping, the Python call.

    python benchmarks/bench_doom_env.py [--env doom_benchmark] [--steps 2000] [--wide_aspect_ratio]
    pytest benchmarks/bench_doom_env.py --benchmark-enable
"""

from __future__ import annotations

import argparse
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from sf.envs import EnvAdapter
from sf_examples.vizdoom.doom_env import DoomEnv
from sf_examples.vizdoom.doom_envs import make_doom_env
from sf_examples.vizdoom.resize import NearestResize

ENV = "doom_benchmark"
STEPS = 1000
FRAMESKIP = 4


@dataclass(frozen=True)
class DoomOverhead:
    env_name: str
    render_hw: tuple[int, int]
    raw_us: float
    env_us: float
    adapter_us: float
    resize_us: float

    def __str__(self) -> str:
        h, w = self.render_hw
        return (
            f"{self.env_name} ({w}x{h} -> 128x72, frameskip {FRAMESKIP}): raw DoomGame {self.raw_us:.0f} us/step, "
            f"DoomEnv {self.env_us:.0f} us/step ({self.env_us / self.raw_us:.3f}x), "
            f"EnvAdapter(DoomEnv) {self.adapter_us:.0f} us/step ({self.adapter_us / self.raw_us:.3f}x), "
            f"resize alone {self.resize_us:.1f} us"
        )


def step_raw(env: DoomEnv, actions: np.ndarray) -> None:
    """The game under `env`, driven directly with the same button vectors."""
    game, vectors = env.game, env.scenario.button_vectors()
    game.set_seed(0)
    game.new_episode()
    for action in actions:
        game.make_action(vectors[action], FRAMESKIP)
        if game.is_episode_finished():
            game.new_episode()
        _ = game.get_state().screen_buffer


def step_env(env: DoomEnv, actions: np.ndarray) -> None:
    env.reset(seed=0)
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def step_adapter(env: EnvAdapter, actions: np.ndarray) -> None:
    env.reset(seed=0)
    for action in actions.astype(np.float32).reshape(-1, 1):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def _us_per_step(fn: Callable[[], None], steps: int) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / steps * 1e6


def _resize_us(env: DoomEnv, number: int = 2000, repeats: int = 5) -> float:
    env.reset(seed=0)
    frame = env.game.get_state().screen_buffer
    resize = NearestResize(frame.shape[1:], env.observation_space.shape[1:])
    return min(timeit.repeat(lambda: resize(frame), number=number, repeat=repeats)) / number * 1e6


def measure(env_name: str = ENV, steps: int = STEPS, repeats: int = 3, wide: bool = False) -> DoomOverhead:
    """Best of `repeats`, the loops interleaved so machine noise hits them alike; one game serves all three."""
    env = make_doom_env(env_name, SimpleNamespace(env_frameskip=FRAMESKIP, wide_aspect_ratio=wide), None)
    adapter = EnvAdapter(env)
    actions = np.random.default_rng(0).integers(env.action_space.n, size=steps)
    raw_us = env_us = adapter_us = float("inf")
    try:
        for _ in range(repeats):
            raw_us = min(raw_us, _us_per_step(lambda: step_raw(env, actions), steps))
            env_us = min(env_us, _us_per_step(lambda: step_env(env, actions), steps))
            adapter_us = min(adapter_us, _us_per_step(lambda: step_adapter(adapter, actions), steps))
        render_hw = (env.game.get_screen_height(), env.game.get_screen_width())
        return DoomOverhead(env_name, render_hw, raw_us, env_us, adapter_us, _resize_us(env))
    finally:
        adapter.close()


def test_doom_env_step(benchmark):
    env = make_doom_env(ENV, SimpleNamespace(env_frameskip=FRAMESKIP), None)
    try:
        benchmark(step_env, env, np.random.default_rng(0).integers(env.action_space.n, size=STEPS))
    finally:
        env.close()
    overhead = measure(ENV, STEPS, repeats=2)
    benchmark.extra_info.update(
        raw_us=overhead.raw_us, env_us=overhead.env_us, adapter_us=overhead.adapter_us, resize_us=overhead.resize_us
    )
    print(f"\n{overhead}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=ENV)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wide_aspect_ratio", action="store_true")
    args = parser.parse_args()
    print(measure(args.env, args.steps, args.repeats, args.wide_aspect_ratio))


if __name__ == "__main__":
    main()
