"""The rollout loop: step a group of envs, write what they return into the trajectory buffers in place,
ask an inference worker for the next actions, hand finished trajectories to the batcher.

Envs are split into `worker_num_splits` groups: while one group waits for its actions the others step
(double-buffered sampling). Every env keeps its own step index, so an env that waits (for a free slot,
or in synchronous mode for the next policy version) simply joins its group's next request later.

With `--env_threads` > 1 a group's envs step in that many contiguous chunks at once, the worker's thread taking the
first: simulators that release the GIL while they compute (MuJoCo) then use more than one core per worker.

With a vector env (`--envpool=True`, `sf.envs.vector`) the worker's envs are one object instead: a split is one batch
step of it (the `env_step/batch_step` scope), written into the buffers with array operations; the per-env
bookkeeping after it is the same. The choice is made once, at start.

With `--batched_sampling=True` (`sf.envs.batched`) the same vector path steps env objects of `agents` copies each:
an env object's copies fill `agents` consecutive slots taken and given back together (the layout of a multi-agent
env), its actions leave the buffers in one gather (`copy_out`), its observations enter them in one tensor copy per
object (`overhead/copy_in`), and returns, lengths and episode ends are kept per copy in arrays; the Python loops run
per env object, never per copy.
"""

from __future__ import annotations

import random
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from itertools import chain, repeat

import numpy as np
import torch

from sf.envs import EnvAdapter, EnvConfig, create_env
from sf.envs.batched import create_batched_envs
from sf.envs.episodes import NO_INFO, EpisodeRecord, episode_record
from sf.envs.registry import create_vector_env, env_shm_names
from sf.envs.training_info import find_reward_shaping_interface, find_training_info_interface, training_info
from sf.envs.vector import VectorConfig, VectorEnv
from sf.runtime.buffers import TrajectoryBuffers, trajectories_per_batch
from sf.runtime.event_loop import Component
from sf.runtime.messages import (
    Actions,
    Episodes,
    PolicyRequest,
    PolicyVersion,
    Release,
    TrainingInfo,
    Trajectories,
)
from sf.supervision.shm_names import Ledger
from sf.utils.roles import RUNNER, Role, batcher_name, policy_queue_name, rollout_worker_name


class RolloutWorker(Component):
    role = Role.ROLLOUT_WORKER
    wait_key = "wait_actions"

    def __init__(
        self,
        cfg,
        worker_idx: int,
        buffers: TrajectoryBuffers,
        ledger: Ledger | None = None,
        incarnation: int = 0,
        versions: list[int] | None = None,
    ):
        """`ledger`: where the run records the /dev/shm names its envs' engines make (`sf.supervision.shm_names`).
        `incarnation`: this life of the worker (`sf.supervision.incarnations`); `versions`: each policy's version now,
        for a worker restarted in a synchronous run (its envs' quotas follow the version)."""
        super().__init__(rollout_worker_name(worker_idx))
        self.cfg = cfg
        self.ledger = ledger
        self.incarnation = incarnation
        self.start_versions = versions
        self.idx = worker_idx
        self.buffers = buffers
        self.T = cfg.rollout
        self.num_envs = cfg.num_envs_per_worker
        self.sync = not cfg.async_rl
        self.env_pool: ThreadPoolExecutor | None = None
        self.vector: VectorEnv | None = None

    # set-up ------------------------------------------------------------------------------------------
    def on_start(self) -> None:
        cfg, n = self.cfg, self.num_envs
        layout = self.buffers.layout
        first_slot = layout.first_slot(self.idx)
        self.agents = layout.agents_per_env  # slots per env, taken and given back together
        self.first_row = first_slot
        self.free = deque(range(first_slot, first_slot + layout.slots_per_worker, layout.agents_per_env))
        self.envs: list[EnvAdapter] = []
        self.rng = random.Random(None if cfg.seed is None else cfg.seed * 7919 + self.idx)
        # per-env state in plain lists: the rollout loop reads and writes them once per env step, where a
        # Python int or float costs a fraction of a numpy scalar
        self.slot = [0] * n
        self.t = [0] * n
        self.policy = [0] * n
        self.pending = [-1] * n  # finished trajectory waiting for its bootstrap value
        self.pending_policy = [0] * n
        self.episode_ended = [False] * n
        self.ep_return = [0.0] * n
        self.ep_len = [0] * n
        self.episodes: dict[int, list[EpisodeRecord]] = {}
        self.returned: dict[int, int] = {}  # group -> its slots released so far (envs of several slots)
        self.need_slot: deque[tuple[int, int]] = deque()  # (env, finished slot)
        self.parked: set[int] = set()
        self.version = list(self.start_versions or [0] * cfg.num_policies)
        self.trained_steps = [0] * cfg.num_policies  # the runner's last word (TrainingInfo)
        self.reward_shaping: dict[int, dict | None] = {}  # policy -> its scheme, once population-based training set one
        self.env_pool = (
            ThreadPoolExecutor(cfg.env_threads - 1, thread_name_prefix=f"{self.name}-env")
            if cfg.env_threads > 1 and not cfg.envpool and not cfg.batched_sampling
            else None
        )
        self.env_stats = cfg.use_record_episode_statistics
        self.done_count = [0] * n
        self.num_splits = cfg.worker_num_splits
        per_split = n // self.num_splits
        self.split_of = [i // per_split for i in range(n)]
        self.inflight: dict[tuple[int, int], tuple[list[int], int]] = {}  # (split, policy) -> (envs, request number)
        self.seq = 0
        self.ready: list[list[int]] = [[] for _ in range(self.num_splits)]
        self.global_env = [self.idx * n + i for i in range(n)]
        self.envs_total = cfg.num_workers * n
        self.traj_per_version = trajectories_per_batch(cfg) // layout.agents_per_env  # rounds of every agent

        delay = self.idx / cfg.num_workers * cfg.decorrelate_experience_max_seconds if self.incarnation == 0 else 0.0
        if delay > 0:
            with self.timing.add_time("wait_decorrelation"):
                time.sleep(delay)  # Sample Factory's rule: workers start spread over the interval
        with self.timing.add_time("init_envs"), self._recording_shm_names():
            if cfg.envpool or cfg.batched_sampling:
                self._start_vector_env()
            else:
                self._start_envs()
        self._step_group = self._step_vector if self.vector is not None else self._step_envs
        # the envs that take Sample Factory's training info and reward shaping at their episodes' ends (None for the
        # others)
        self.info_takers = [find_training_info_interface(env.env) for env in self.envs] or [None] * n
        self.shaping_takers = [find_reward_shaping_interface(env.env) for env in self.envs] or [None] * n
        self.loop.every(1.0, self._send_episode_stats, owner=self)
        for split in range(self.num_splits):
            self._request(split)

    def _recording_shm_names(self):
        return self.ledger.recording(env_shm_names(self.cfg.env)) if self.ledger is not None else nullcontext()

    def _start_envs(self) -> None:
        cfg, n = self.cfg, self.num_envs
        obs_np, rnn_np = self.buffers.obs_np, self.buffers.np["rnn_states"]
        for i in range(n):
            env_id = self.global_env[i]
            env = EnvAdapter(create_env(cfg.env, cfg, EnvConfig(self.idx, i, env_id)), cfg.env_framestack)
            seed = None if cfg.seed is None else cfg.seed * 100_003 + env_id
            obs = env.reset(seed=seed)
            if cfg.decorrelate_envs_on_one_worker and i > 0:
                # env i runs i rollouts out of phase with env 0, so the worker's envs do not reset together; past
                # the time limit the same reset phase comes sooner. With --decorrelate_by_truncation its first
                # episode ends that much early instead (same resets, nothing simulated to get there)
                offset, limit = cfg.rollout * i, env.max_episode_steps
                offset = offset % limit if limit else offset
                if offset and limit and cfg.decorrelate_by_truncation:
                    env.cut_first_episode(limit - offset)
                elif offset:
                    obs = env.random_steps(offset, seed)
            self.envs.append(env)
            slot = self.free.popleft()
            self.slot[i] = slot
            self.policy[i] = self._draw_policy(i)
            for key, value in obs.items():
                obs_np[key][slot, 0] = value
            rnn_np[slot, 0] = 0.0
            self._clear_step_flags(slot)
            self.buffers.np["traj_time"][slot, 0] = time.monotonic()
            self.ready[self.split_of[i]].append(i)

    def _start_vector_env(self) -> None:
        """One vector env holds the worker's envs, in env order. They start together; with
        --decorrelate_by_truncation their first episodes are cut as on the per-env path (no random steps here)."""
        cfg, n, agents = self.cfg, self.num_envs, self.agents
        config = VectorConfig(self.idx, n, self.global_env[0])
        make = create_batched_envs if cfg.batched_sampling else create_vector_env
        self.vector = make(cfg.env, cfg, config)
        if getattr(self.vector, "agents", 1) != agents:
            raise RuntimeError(
                f"the env objects of {cfg.env!r} have {self.vector.agents} copies, not {agents} as probed"
            )
        # per copy of the worker (env i's copy a is row i * agents + a): what its running episode has summed so far
        self.row_return = np.zeros(n * agents, np.float64)
        self.row_len = np.zeros(n * agents, np.int64)
        obs = self.vector.reset()
        limit = self.vector.max_episode_steps
        if cfg.decorrelate_envs_on_one_worker and cfg.decorrelate_by_truncation and limit:
            offsets = np.arange(n) * cfg.rollout % limit
            self.vector.cut_first_episodes(np.where(offsets > 0, limit - offsets, 0))
        slots = [self.free.popleft() for _ in range(n)]
        for i, slot in enumerate(slots):
            self.slot[i] = slot
            self.policy[i] = self._draw_policy(i)
            self.ready[self.split_of[i]].append(i)
            self._clear_step_flags(slot)
        self._write_obs_rows(obs, list(range(n)), 0)
        rows, steps = self._group_rows(np.array(slots), np.zeros(n, np.int64))
        self.buffers.np["rnn_states"][rows, 0] = 0.0
        self.buffers.np["traj_time"][rows, 0] = time.monotonic()

    def _draw_policy(self, i: int) -> int:
        """The policy env i acts for next: drawn at random, or with --async_rl=False fixed by the env's global index
        (Sample Factory's rule), so that every policy's batch is dealt over envs of its own."""
        if self.cfg.num_policies == 1:
            return 0
        if self.cfg.batched_sampling:  # Sample Factory's batched sampler: a worker collects for one policy
            return self.idx % self.cfg.num_policies
        if self.sync:
            return self.global_env[i] % self.cfg.num_policies
        return self.rng.randrange(self.cfg.num_policies)

    # the rollout loop ---------------------------------------------------------------------------------
    def _on_actions(self, msg: Actions) -> None:
        """Actions for these splits are in the buffers: step each split in turn. An answer to a request sent again
        since (an inference worker restarted) is not the one awaited, and is ignored."""
        policy, inflight = msg.policy_id, self.inflight
        for split, seq in zip(msg.splits, msg.seqs):
            awaited = inflight.get((split, policy))
            if awaited is not None and awaited[1] == seq:
                self._advance_split(split, self._answered(split, policy))

    def _answered(self, split: int, policy: int) -> list[int]:
        """The envs whose every action is in the buffers once `policy` answered the split's request."""
        return self.inflight.pop((split, policy))[0]

    def _advance_split(self, split: int, envs: list[int]) -> None:
        """Step these envs of the split: first every env, resets included (one `env_step` scope), then their results
        into the buffers (one `overhead` scope), so the timing cost is per split, not per env."""
        pending = self.pending
        finished: dict[int, list[int]] = {}
        stepping = []
        for i in envs:
            if pending[i] >= 0:
                self._hand_over(i, finished)
            if self.sync and self.done_count[i] >= self._quota(i):
                self.parked.add(i)
            else:
                stepping.append(i)
        if stepping:
            self._step_group(stepping, split)
        for policy_id, slots in finished.items():
            self.send(batcher_name(policy_id), Trajectories(slots, self.idx, self.incarnation))
        self._request(split)
        self._update_wait()

    def _hand_over(self, i: int, finished: dict[int, list[int]]) -> None:
        """Env i's finished trajectory has its bootstrap value now (the first of its new slot): to the batcher."""
        old, T, agents = self.pending[i], self.T, self.agents
        values_np = self.buffers.np["values"]
        if agents == 1:
            values_np[old, T] = values_np[self.slot[i], 0]
            finished.setdefault(self.pending_policy[i], []).append(old)
        else:
            new = self.slot[i]
            values_np[old : old + agents, T] = values_np[new : new + agents, 0]
            finished.setdefault(self.pending_policy[i], []).extend(range(old, old + agents))
        self.pending[i] = -1

    def _step_envs(self, stepping: list[int], split: int) -> None:
        b, T, timing = self.buffers, self.T, self.timing
        obs_np, actions_np, rewards_np = b.obs_np, b.np["actions"], b.np["rewards"]
        dones_np, time_outs_np, rnn_np = b.np["dones"], b.np["time_outs"], b.np["rnn_states"]
        slot, t, envs = self.slot, self.t, self.envs
        with timing.add_time("env_step"):
            if self.env_pool is None:
                results = [envs[i].step(actions_np[slot[i], t[i]]) for i in stepping]
                resets = {k: envs[stepping[k]].reset() for k, r in enumerate(results) if r[2] or r[3]}
            else:
                results, resets = self._step_in_threads(stepping)
        with timing.add_time("overhead"):
            ep_return, ep_len, ready = self.ep_return, self.ep_len, self.ready[split]
            for k, (i, (obs, reward, terminated, truncated, info)) in enumerate(zip(stepping, results)):
                s, step = slot[i], t[i]
                rewards_np[s, step] = reward
                ep_return[i] += reward
                ep_len[i] += 1
                if terminated or truncated:  # a slot's dones and time-outs are zeroed when the env takes it
                    dones_np[s, step] = 1.0
                    time_outs_np[s, step] = float(truncated and not terminated)
                    self._episode_done(i, info)
                    obs = resets[k]
                    rnn_np[s, step + 1] = 0.0
                for key, value in obs.items():
                    obs_np[key][s, step + 1] = value
                t[i] = step + 1
                if step + 1 == T:
                    with timing.add_time("complete_rollouts"):
                        self._complete(i, ready)
                else:
                    ready.append(i)

    def _step_vector(self, stepping: list[int], split: int) -> None:
        """`_step_envs` for a vector env: one batch step of the split's envs (env objects, with batched sampling),
        then every buffer write and the episode statistics as array operations over the split's rows; only the
        trajectory bookkeeping stays per env (object)."""
        b, T, timing = self.buffers, self.T, self.timing
        starts = np.array([self.slot[i] for i in stepping])
        slots, steps = self._group_rows(starts, np.array([self.t[i] for i in stepping]))
        with timing.add_time("copy_out"):
            actions = b.np["actions"][slots, steps]
        with timing.add_time("env_step"), timing.add_time("batch_step"):
            result = self.vector.step(np.array(stepping, np.int32), actions)
        with timing.add_time("overhead"):
            with timing.add_time("copy_in"):
                self._write_obs_rows(result.obs, stepping, 1)
            ended = result.terminated | result.truncated
            b.np["rewards"][slots, steps] = result.rewards
            b.np["dones"][slots, steps] = ended
            b.np["time_outs"][slots, steps] = result.truncated & ~result.terminated
            rows = self._worker_rows(np.array(stepping))
            self.row_return[rows] += result.rewards
            self.row_len[rows] += 1
            if ended.any():
                b.np["rnn_states"][slots[ended], steps[ended] + 1] = 0.0
                with timing.add_time("episode_stats"):
                    self._episodes_ended(stepping, rows, np.flatnonzero(ended), result.infos)
            t, ready = self.t, self.ready[split]
            for i in stepping:
                t[i] += 1
                if t[i] == T:
                    with timing.add_time("complete_rollouts"):
                        self._complete(i, ready)
                else:
                    ready.append(i)

    def _group_rows(self, starts: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The buffer rows (slot, step) of envs whose groups start at `starts` and stand at `steps`: one row per copy
        (agent), env after env."""
        if self.agents == 1:
            return starts, steps
        offsets = np.arange(self.agents)
        return (starts[:, None] + offsets).reshape(-1), np.repeat(steps, self.agents)

    def _worker_rows(self, envs: np.ndarray) -> np.ndarray:
        """Each copy's index in the worker's per-copy arrays, for these envs, env after env."""
        if self.agents == 1:
            return envs
        return (envs[:, None] * self.agents + np.arange(self.agents)).reshape(-1)

    def _write_obs_rows(self, obs: dict, envs: list[int], ahead: int) -> None:
        """Observations of these envs (rows env after env) into step t + `ahead` of their slots. A single env per
        row goes in by one array assignment; an env object's copies go in by one tensor copy each, from wherever
        the env keeps them (numpy, CPU or GPU tensors), straight into the shared buffers."""
        slot, t, agents = self.slot, self.t, self.agents
        if agents == 1:
            slots, steps = np.array([slot[i] for i in envs]), np.array([t[i] for i in envs]) + ahead
            for key, rows in obs.items():
                self.buffers.obs_np[key][slots, steps] = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else rows
            return
        for key, rows in obs.items():
            dst = self.buffers.obs[key]
            src = torch.from_numpy(rows) if isinstance(rows, np.ndarray) else rows
            for k, i in enumerate(envs):
                s = slot[i]
                dst[s : s + agents, t[i] + ahead].copy_(src[k * agents : (k + 1) * agents])

    def _episodes_ended(self, stepping: list[int], rows: np.ndarray, ended: np.ndarray, infos: dict[int, dict]) -> None:
        """Report the episodes that ended at positions `ended` of the step's rows and start their copies afresh."""
        done = rows[ended]
        returns, lengths = self.row_return[done].tolist(), self.row_len[done].tolist()
        self.row_return[done] = 0.0
        self.row_len[done] = 0
        agents, env_stats = self.agents, self.env_stats
        for k, ret, length in zip(ended.tolist(), returns, lengths):
            i = stepping[k // agents]
            episode = episode_record(infos.get(k, NO_INFO), ret, length, env_stats)
            if episode is not None:
                self.episodes.setdefault(self.policy[i], []).append(episode)
        if agents == 1:
            for k in ended.tolist():
                self.episode_ended[stepping[k]] = True

    def _step_in_threads(self, stepping: list[int]) -> tuple[list[tuple], dict[int, dict]]:
        """The same as the one-thread loop, in `--env_threads` contiguous chunks: results in `stepping` order."""
        size = -(-len(stepping) // self.cfg.env_threads)
        chunks = [stepping[k : k + size] for k in range(0, len(stepping), size)]
        futures = [self.env_pool.submit(self._step_and_reset, chunk) for chunk in chunks[1:]]
        done = self._step_and_reset(chunks[0])
        for future in futures:
            done += future.result()
        return [result for result, _ in done], {k: reset for k, (_, reset) in enumerate(done) if reset is not None}

    def _step_and_reset(self, ids: list[int]) -> list[tuple[tuple, dict | None]]:
        envs, actions_np, slot, t = self.envs, self.buffers.np["actions"], self.slot, self.t
        done = []
        for i in ids:
            result = envs[i].step(actions_np[slot[i], t[i]])
            done.append((result, envs[i].reset() if result[2] or result[3] else None))
        return done

    def _update_wait(self) -> None:
        """Name what the worker waits for now: actions while a request is out, else a new policy version
        (synchronous mode, every env has its quota) or free slots (the batcher still holds them all)."""
        if self.inflight:
            self.wait_key = "wait_actions"
        elif self.parked:
            self.wait_key = "wait_policy_version"
        elif self.need_slot:
            self.wait_key = "wait_slots"
        else:
            self.wait_key = "wait_actions"

    def _episode_done(self, i: int, info: dict) -> None:
        episode = episode_record(info, self.ep_return[i], self.ep_len[i], self.env_stats)
        if episode is not None:
            self.episodes.setdefault(self.policy[i], []).append(episode)
        self.ep_return[i] = 0.0
        self.ep_len[i] = 0
        self.episode_ended[i] = True
        self._tell_env(i, self.policy[i], 0)

    def _tell_env(self, i: int, policy: int, agent: int) -> None:
        """At the end of an episode of env i's `agent`, acting for `policy`: Sample Factory's training info, and the
        policy's reward shaping once population-based training has set one."""
        shaping = self.reward_shaping.get(policy)
        taker = self.info_takers[i]
        if taker is not None:
            taker.set_training_info(training_info(policy, self.trained_steps[policy], shaping))
        shaper = self.shaping_takers[i]
        if shaper is not None and shaping is not None:
            shaper.set_reward_shaping(shaping, agent)

    def _complete(self, i: int, ready: list[int]) -> None:
        """Trajectory full: continue in a fresh slot; the old one waits for the value of the next state."""
        old = self.slot[i]
        self.buffers.np["traj_time"][old : old + self.agents, 1] = time.monotonic()
        self.done_count[i] += 1
        if not self.free:
            self.need_slot.append((i, old))
            return
        self._continue_in_new_slot(i, old)
        ready.append(i)

    def _continue_in_new_slot(self, i: int, old: int) -> None:
        new = self.free.popleft()
        self._carry_over(old, new)
        self._clear_step_flags(new)
        self.buffers.np["traj_time"][new : new + self.agents, 0] = time.monotonic()
        self.pending[i] = old
        self.slot[i] = new
        self.t[i] = 0
        self._next_policy(i)

    def _next_policy(self, i: int) -> None:
        """Env i starts a trajectory: the finished one goes to the batcher of the policy that collected it; after an
        episode's end the env acts for a policy drawn again."""
        self.pending_policy[i] = self.policy[i]
        if self.episode_ended[i] and self.cfg.num_policies > 1 and not self.sync:
            self.policy[i] = self._draw_policy(i)
        self.episode_ended[i] = False

    def _carry_over(self, old: int, new: int) -> None:
        """A trajectory continues in a new slot (group) from the last observation and RNN state of the old one."""
        b, T, agents = self.buffers, self.T, self.agents
        for arr in b.obs_np.values():
            arr[new : new + agents, 0] = arr[old : old + agents, T]
        b.np["rnn_states"][new : new + agents, 0] = b.np["rnn_states"][old : old + agents, T]

    def _clear_step_flags(self, slot: int) -> None:
        """A slot starts with no episode end: the step loop then writes dones and time-outs only when one ends."""
        self.buffers.np["dones"][slot : slot + self.agents] = 0.0
        self.buffers.np["time_outs"][slot : slot + self.agents] = 0.0

    def _quota(self, i: int) -> int:
        """Synchronous mode: how many trajectories env i collects for the current policy version.

        The batch's trajectories are dealt out over the envs of the policy (every `num_policies`-th env by global
        index); the remainder rotates with the version.
        """
        policies = self.cfg.num_policies
        envs = self.envs_total // policies
        base, extra = divmod(self.traj_per_version, envs)
        shift = (self.global_env[i] // policies - self.version[self.policy[i]] * extra) % envs
        return base + (1 if shift < extra else 0)

    def _request(self, split: int) -> None:
        envs = self.ready[split]
        if not envs or any(key[0] == split for key in self.inflight):
            return
        with self.timing.add_time("enqueue_policy_requests"):
            for policy_id, group in self._by_policy(envs).items():
                self._send_request(split, policy_id, group)
            self.ready[split] = []

    def _by_policy(self, envs: list[int]) -> dict[int, list[int]]:
        """Policy -> the envs of `envs` that need its actions."""
        by_policy: dict[int, list[int]] = {}
        for i in envs:
            by_policy.setdefault(self.policy[i], []).append(i)
        return by_policy

    def _send_request(self, split: int, policy_id: int, envs: list[int]) -> None:
        self.seq += 1
        self.inflight[(split, policy_id)] = (envs, self.seq)
        slots, steps = self._rows(envs, policy_id)
        request = PolicyRequest(self.idx, split, slots, steps, self.incarnation, self.seq)
        self.send(policy_queue_name(policy_id), request)

    def _rows(self, group: list[int], policy_id: int) -> tuple[list[int], list[int]]:
        """The (slot, step) of each row of `group`'s envs whose actions `policy_id`'s inference worker computes."""
        if self.agents == 1:
            return [self.slot[i] for i in group], [self.t[i] for i in group]
        agents, slot, t = self.agents, self.slot, self.t
        slots = list(chain.from_iterable(range(slot[i], slot[i] + agents) for i in group))
        return slots, list(chain.from_iterable(repeat(t[i], agents) for i in group))

    def resend_requests(self, policy_id: int) -> None:
        """The policy's inference workers moved to a new inbox: ask again for what the old one did not answer."""
        for (split, policy), (envs, _) in list(self.inflight.items()):
            if policy == policy_id:
                self._send_request(split, policy, envs)

    # messages from the learner side ---------------------------------------------------------------------
    def _on_release(self, msg: Release) -> None:
        self.free.extend(self._reusable(msg.slots))
        touched = set()
        while self.need_slot and self.free:
            i, old = self.need_slot.popleft()
            self._continue_in_new_slot(i, old)
            split = self.split_of[i]
            self.ready[split].append(i)
            touched.add(split)
        for split in touched:
            self._request(split)
        self._update_wait()

    def _reusable(self, slots: list[int]) -> list[int]:
        """The slots that a release makes free for an env: a group is free again once the batcher has released every
        slot of it (they may go to different batches)."""
        agents = self.agents
        if agents == 1:
            return slots
        free, returned, first_row = [], self.returned, self.first_row
        for s in slots:
            group = s - (s - first_row) % agents
            count = returned.get(group, 0) + 1
            if count == agents:
                del returned[group]
                free.append(group)
            else:
                returned[group] = count
        return free

    def _on_version(self, msg: PolicyVersion) -> None:
        policy_id, version = msg.policy_id, msg.version
        if version <= self.version[policy_id]:
            return
        self.version[policy_id] = version
        resumed = [i for i in self.parked if self.policy[i] == policy_id]
        touched = set()
        for i in resumed:
            self.parked.discard(i)
            split = self.split_of[i]
            self.ready[split].append(i)
            touched.add(split)
        for i in range(self.num_envs):
            if self.policy[i] == policy_id:
                self.done_count[i] = 0
        for split in touched:
            self._request(split)
        self._update_wait()

    def _on_training_info(self, msg: TrainingInfo) -> None:
        for policy_id, steps in msg.env_steps.items():
            self.trained_steps[policy_id] = steps
        self.reward_shaping = msg.reward_shaping

    def _send_episode_stats(self) -> None:
        for policy_id, episodes in self.episodes.items():
            if episodes:
                self.send(RUNNER, Episodes(policy_id, episodes))
        self.episodes = {}

    def on_stop(self) -> None:
        self._send_episode_stats()
        if self.env_pool is not None:
            self.env_pool.shutdown()
        for env in self.envs:
            env.close()
        if self.vector is not None:
            self.vector.close()
