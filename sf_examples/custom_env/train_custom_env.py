"""Train on a custom environment: register a factory under a name, then pass `--env=<name>`.

    python -m sf_examples.custom_env.train_custom_env --env=goal_gate --train_for_env_steps=1000000

A factory is called as `factory(env_name, cfg, env_config, render_mode)` and returns a gymnasium env; sf reads its
spaces (here Dict observations and a Tuple(Discrete, Box) action) and lays out buffers, encoders and action heads
from them. No family defaults are applied: every flag has its base default unless given.
"""

from __future__ import annotations

import sys

from sf.envs.families import family_named
from sf.envs.registry import EnvConfig, register_env
from sf.train import run_rl
from sf_examples.custom_env.goal_gate_env import GoalGateEnv


def make_goal_gate(env_name: str, cfg, env_config: EnvConfig | None, render_mode: str | None = None) -> GoalGateEnv:
    return GoalGateEnv(render_mode=render_mode)


def register_custom_envs() -> None:
    register_env("goal_gate", make_goal_gate)


def main(argv: list[str] | None = None) -> int:
    return run_rl(family_named("custom_env").cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
