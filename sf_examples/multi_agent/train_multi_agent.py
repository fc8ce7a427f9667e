"""Train a multi-agent env: `python -m sf_examples.multi_agent.train_multi_agent --env=cooperative_cue`.

`cooperative_cue` is two agents that must answer one cue differently (`cooperative_cue.py`); in
`cooperative_cue_resting` the second agent rests every 4th step (`info["is_active"]` False), and those steps are
masked out of training. Each agent's experience trains the one policy, its frames count in the frame total and its
episodes in the statistics, with the env's `true_objective` and `episode_extra_stats` (accuracy) beside the reward.

`cue_duel` is a two-player zero-sum game (`cue_duel.py`) for self-play: with `--num_policies` > 1 each seat acts
for a policy of the population (`--pbt_mix_policies_in_one_env`, on by default), and `--with_pbt=True` trains the
population.
"""

from __future__ import annotations

import sys
from typing import Any

from sf.envs.families import family_of_argv
from sf.envs.registry import EnvConfig, register_env
from sf.train import run_rl
from sf_examples.multi_agent.cooperative_cue import CooperativeCue
from sf_examples.multi_agent.cue_duel import CueDuel

REST_EVERY = {"cooperative_cue": 0, "cooperative_cue_resting": 4}


def make_cooperative_cue(
    env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None
) -> CooperativeCue:
    return CooperativeCue(rest_every=REST_EVERY[env_name])


def make_cue_duel(env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None) -> CueDuel:
    return CueDuel()


def register_multi_agent_envs() -> None:
    for name in REST_EVERY:
        register_env(name, make_cooperative_cue)
    register_env("cue_duel", make_cue_duel)


def cooperative_cue_defaults(env_name: str) -> dict[str, Any]:
    """Each cue is independent of the last: a short horizon and a small network learn it in tens of thousands of
    frames (every flag can be overridden)."""
    return {
        "use_rnn": False,
        "encoder_mlp_layers": [32],
        "num_envs_per_worker": 8,
        "rollout": 32,
        "batch_size": 512,
        "num_epochs": 4,
        "learning_rate": 3e-3,
        "gamma": 0.5,
        "exploration_loss_coeff": 0.001,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_rl(family_of_argv(argv).cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
