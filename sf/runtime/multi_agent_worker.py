"""The rollout loop for multi-agent envs (`sf.envs.multi_agent`): a rollout worker whose envs have several agents.

An env's agents move together: one request asks for all their actions, one env step takes them, and their
trajectories fill `agents_per_env` consecutive slots, taken and given back as one group (the env's slot is the
group's first). So everything the worker keeps per env (its step index, policy, split, quota, pending trajectory)
is the single-agent worker's, and only what differs per agent lives here: the trajectory rows, the episode
statistics and whether the agent is active. An agent's step while it is inactive (`info["is_active"]` False on
the step before) is written with `active` False, and the learner leaves it out of every loss.

With several policies and `--pbt_mix_policies_in_one_env` (Sample Factory's default; asynchronous runs), each agent
acts for a policy of its own, drawn by Sample Factory's rule (`sf.runtime.policy_mapping`): one env step then waits
for the answer of every policy its agents act for, and each agent's trajectory goes to its own policy's batcher.
Otherwise every agent of an env acts for the env's policy, drawn again at an episode's end once every agent's episode
has ended on the same step. Either way an agent changes policy where a trajectory starts, with a fresh RNN state.
"""

from __future__ import annotations

import random
import time

from sf.envs import EnvConfig
from sf.envs.episodes import episode_record
from sf.envs.multi_agent import MultiAgentAdapter, open_env
from sf.runtime.policy_mapping import PolicyMapping
from sf.runtime.rollout_worker import RolloutWorker


class MultiAgentRolloutWorker(RolloutWorker):
    envs: list[MultiAgentAdapter]

    def on_start(self) -> None:
        layout = self.buffers.layout
        self.agents = agents = layout.agents_per_env
        rows = self.num_envs * agents
        self.agent_return = [0.0] * rows  # per agent of the worker: env i's agent a is entry i * agents + a
        self.agent_len = [0] * rows
        self.agent_active = [True] * rows  # whether the agent acts in its next step
        cfg = self.cfg
        self.mixing = cfg.pbt_mix_policies_in_one_env and cfg.num_policies > 1 and cfg.async_rl
        seed = None if cfg.seed is None else cfg.seed * 7919 + 104_729 + self.idx
        self.mapping = PolicyMapping(cfg.num_policies, agents, random.Random(seed)) if self.mixing else None
        self.agent_policy = [0] * rows  # the policy each agent acts for
        self.agent_pending_policy = [0] * rows  # the policy that collected each agent's finished trajectory
        self.agent_next_policy = [0] * rows  # what the agent acts for from its next trajectory on
        self.waiting = [0] * self.num_envs  # policies whose actions env i still waits for (mixing)
        super().on_start()

    def _start_envs(self) -> None:
        cfg, n, agents = self.cfg, self.num_envs, self.agents
        b = self.buffers
        now = time.monotonic()
        for i in range(n):
            env_id = self.global_env[i]
            env = open_env(cfg, EnvConfig(self.idx, i, env_id))
            if not isinstance(env, MultiAgentAdapter) or env.num_agents != agents:
                env.close()
                raise RuntimeError(f"env {env_id} of {cfg.env!r} is not a multi-agent env of {agents} agents as probed")
            seed = None if cfg.seed is None else cfg.seed * 100_003 + env_id
            obs = env.reset(seed=seed)
            if cfg.decorrelate_envs_on_one_worker and i > 0:
                # as Sample Factory: env i starts i rollouts of random actions into its episodes (it resets itself)
                obs = env.random_steps(cfg.rollout * i, seed)
            self.envs.append(env)
            slot = self.free.popleft()
            self.slot[i] = slot
            self.policy[i] = self._draw_policy(i)
            first = i * agents
            drawn = self.mapping.start(i) if self.mixing else [self.policy[i]] * agents
            self.agent_policy[first : first + agents] = drawn
            self.agent_next_policy[first : first + agents] = drawn
            self._write_obs(slot, 0, obs)
            b.np["rnn_states"][slot : slot + agents, 0] = 0.0
            self._clear_step_flags(slot)
            b.np["traj_time"][slot : slot + agents, 0] = now
            self.ready[self.split_of[i]].append(i)

    def _write_obs(self, slot: int, step: int, obs: list[dict]) -> None:
        obs_np = self.buffers.obs_np
        for a, agent_obs in enumerate(obs):
            for key, value in agent_obs.items():
                obs_np[key][slot + a, step] = value

    # the rollout loop ------------------------------------------------------------------------------------
    def _step_envs(self, stepping: list[int], split: int) -> None:
        b, T, timing, agents = self.buffers, self.T, self.timing, self.agents
        actions_np, rewards_np = b.np["actions"], b.np["rewards"]
        dones_np, time_outs_np, rnn_np, active_np = b.np["dones"], b.np["time_outs"], b.np["rnn_states"], b.np["active"]
        slot, t, envs = self.slot, self.t, self.envs
        with timing.add_time("env_step"):
            if self.env_pool is None:
                results = [envs[i].step(actions_np[slot[i] : slot[i] + agents, t[i]]) for i in stepping]
            else:
                results, _ = self._step_in_threads(stepping)
        with timing.add_time("overhead"):
            ep_return, ep_len, active, ready = self.agent_return, self.agent_len, self.agent_active, self.ready[split]
            for i, (obs, rewards, terminated, truncated, infos) in zip(stepping, results):
                s, step, first = slot[i], t[i], i * agents
                active_np[s : s + agents, step] = active[first : first + agents]
                every_agent_done = True
                for a in range(agents):
                    k, row = first + a, s + a
                    reward = rewards[a]
                    rewards_np[row, step] = reward
                    ep_return[k] += reward
                    ep_len[k] += 1
                    info = infos[a]
                    if terminated[a] or truncated[a]:  # the env has reset the agent: obs is its next episode's
                        dones_np[row, step] = 1.0
                        time_outs_np[row, step] = float(truncated[a] and not terminated[a])
                        rnn_np[row, step + 1] = 0.0
                        self._agent_episode_done(i, k, info)
                    else:
                        every_agent_done = False
                    active[k] = bool(info.get("is_active", True))
                if every_agent_done:
                    self.episode_ended[i] = True
                self._write_obs(s, step + 1, obs)
                t[i] = step + 1
                if step + 1 == T:
                    with timing.add_time("complete_rollouts"):
                        self._complete(i, ready)
                else:
                    ready.append(i)

    def _step_and_reset(self, ids: list[int]) -> list[tuple[tuple, None]]:
        """One `--env_threads` chunk: a multi-agent env resets itself."""
        envs, actions_np, slot, t, agents = self.envs, self.buffers.np["actions"], self.slot, self.t, self.agents
        return [(envs[i].step(actions_np[slot[i] : slot[i] + agents, t[i]]), None) for i in ids]

    def _agent_episode_done(self, i: int, k: int, info: dict) -> None:
        policy = self.agent_policy[k]
        episode = episode_record(info, self.agent_return[k], self.agent_len[k], self.env_stats)
        if episode is not None:
            self.episodes.setdefault(policy, []).append(episode)
        self.agent_return[k] = 0.0
        self.agent_len[k] = 0
        if self.mixing:
            self.agent_next_policy[k] = self.mapping.on_episode_end(i, k - i * self.agents)
        self._tell_env(i, policy, k - i * self.agents)

    # policies: one per agent -----------------------------------------------------------------------------
    def _next_policy(self, i: int) -> None:
        """Env i starts a trajectory in a new group of slots: each agent's finished one goes to the policy that
        collected it, and an agent that acts for another policy from now on starts it with a fresh RNN state."""
        super()._next_policy(i)
        first, rnn_states = i * self.agents, self.buffers.np["rnn_states"]
        for a in range(self.agents):
            k = first + a
            self.agent_pending_policy[k] = self.agent_policy[k]
            upcoming = self.agent_next_policy[k] if self.mixing else self.policy[i]
            if upcoming != self.agent_policy[k]:
                self.agent_policy[k] = upcoming
                rnn_states[self.slot[i] + a, 0] = 0.0

    def _by_policy(self, envs: list[int]) -> dict[int, list[int]]:
        if not self.mixing:
            return super()._by_policy(envs)
        by_policy: dict[int, list[int]] = {}
        agents, agent_policy = self.agents, self.agent_policy
        for i in envs:
            first = i * agents
            policies = set(agent_policy[first : first + agents])
            self.waiting[i] = len(policies)
            for policy in policies:
                by_policy.setdefault(policy, []).append(i)
        return by_policy

    def _answered(self, split: int, policy: int) -> list[int]:
        """With mixing, an env steps once every policy its agents act for has answered."""
        envs = super()._answered(split, policy)
        if not self.mixing:
            return envs
        waiting, complete = self.waiting, []
        for i in envs:
            waiting[i] -= 1
            if waiting[i] == 0:
                complete.append(i)
        return complete

    # slots: a group of one per agent ---------------------------------------------------------------------
    def _rows(self, group: list[int], policy_id: int) -> tuple[list[int], list[int]]:
        agents, slot, t = self.agents, self.slot, self.t
        if self.mixing:
            agent_policy = self.agent_policy
            chosen = [(i, a) for i in group for a in range(agents) if agent_policy[i * agents + a] == policy_id]
            return [slot[i] + a for i, a in chosen], [t[i] for i, _ in chosen]
        rows = [slot[i] + a for i in group for a in range(agents)]
        return rows, [t[i] for i in group for _ in range(agents)]

    def _hand_over(self, i: int, finished: dict[int, list[int]]) -> None:
        old, new, T, agents = self.pending[i], self.slot[i], self.T, self.agents
        np_ = self.buffers.np
        np_["values"][old : old + agents, T] = np_["values"][new : new + agents, 0]
        np_["traj_time"][old + 1 : old + agents] = np_["traj_time"][old]  # the group's stamps went to its first slot
        first = i * agents
        for a in range(agents):
            finished.setdefault(self.agent_pending_policy[first + a], []).append(old + a)
        self.pending[i] = -1
