"""Per-step cost of EnvAdapter on CartPole-v1, as a ratio to stepping the same gymnasium env directly.

python benchmarks/bench_env_adapter.py [--steps 20000]
pytest benchmarks/bench_env_adapter.py --benchmark-enable
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from sf.envs import EnvAdapter

ENV_ID = "CartPole-v1"
STEPS = 5000


@dataclass(frozen=True)
class Overhead:
    raw_us: float
    adapter_us: float

    @property
    def ratio(self) -> float:
        return self.adapter_us / self.raw_us

    def __str__(self) -> str:
        return (
            f"{ENV_ID}: raw {self.raw_us:.2f} us/step, adapter {self.adapter_us:.2f} us/step, "
            f"overhead {self.adapter_us - self.raw_us:.2f} us/step, ratio {self.ratio:.3f}x"
        )


def step_raw(env: gym.Env, steps: int) -> None:
    env.reset(seed=0)
    for i in range(steps):
        _, _, terminated, truncated, _ = env.step(i & 1)
        if terminated or truncated:
            env.reset()


def step_adapter(env: EnvAdapter, actions: np.ndarray) -> None:
    env.reset(seed=0)
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def adapter_actions(steps: int) -> np.ndarray:
    """The raw loop's action sequence as rows of the float32 buffer the rollout worker hands the adapter."""
    return (np.arange(steps) & 1).astype(np.float32).reshape(steps, 1)


def _us_per_step(fn: Callable[[], None], steps: int) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / steps * 1e6


def measure(steps: int = STEPS, repeats: int = 5) -> Overhead:
    """Best of `repeats` for both loops in one process, interleaved so machine noise hits them alike."""
    raw, adapter, actions = gym.make(ENV_ID), EnvAdapter(gym.make(ENV_ID)), adapter_actions(steps)
    raw_us, adapter_us = float("inf"), float("inf")
    for _ in range(repeats):
        raw_us = min(raw_us, _us_per_step(lambda: step_raw(raw, steps), steps))
        adapter_us = min(adapter_us, _us_per_step(lambda: step_adapter(adapter, actions), steps))
    raw.close()
    adapter.close()
    return Overhead(raw_us, adapter_us)


def test_raw_env_step(benchmark):
    env = gym.make(ENV_ID)
    benchmark(step_raw, env, STEPS)


def test_adapter_env_step(benchmark):
    env = EnvAdapter(gym.make(ENV_ID))
    benchmark(step_adapter, env, adapter_actions(STEPS))
    overhead = measure(STEPS, repeats=3)
    benchmark.extra_info.update(raw_us=overhead.raw_us, adapter_us=overhead.adapter_us, ratio_vs_raw=overhead.ratio)
    print(f"\n{overhead}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(measure(args.steps, args.repeats))


if __name__ == "__main__":
    main()
