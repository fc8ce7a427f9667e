"""Which policy each agent of a multi-agent env acts for when policies mix in one env (`--pbt_mix_policies_in_one_env`,
self-play within a population): Sample Factory's rule (its `AgentPolicyMapping`).

Each env holds a draw: one policy per agent, each uniform over the population. An agent takes its env's current draw
when its episode ends. Every agent's episode end in the env is counted (the agents' first draws count one each); the
env draws again on the first few counts (fewer than `EARLY_DRAWS`) and then every `RESAMPLE_EVERY_EPISODES` episodes
per agent (the count a multiple of that times the number of agents).
"""

from __future__ import annotations

import random

RESAMPLE_EVERY_EPISODES = 10
EARLY_DRAWS = 5


class PolicyMapping:
    def __init__(self, num_policies: int, num_agents: int, rng: random.Random):
        self.num_policies = num_policies
        self.num_agents = num_agents
        self.rng = rng
        self.draws: dict[int, list[int]] = {}  # env -> its current draw, a policy per agent
        self.counts: dict[int, int] = {}  # env -> its agents' episode ends, and first draws, so far

    def start(self, env: int) -> list[int]:
        """The policies env's agents act for in their first episodes."""
        self._draw(env)
        self.counts[env] = self.num_agents
        return list(self.draws[env])

    def on_episode_end(self, env: int, agent: int) -> int:
        """The policy `agent` of `env` acts for in its next episode."""
        count = self.counts[env]
        if count < EARLY_DRAWS or count % (self.num_agents * RESAMPLE_EVERY_EPISODES) == 0:
            self._draw(env)
        self.counts[env] = count + 1
        return self.draws[env][agent]

    def _draw(self, env: int) -> None:
        self.draws[env] = [self.rng.randrange(self.num_policies) for _ in range(self.num_agents)]
