"""Self-play in one env: with `--pbt_mix_policies_in_one_env`, each seat of a multi-agent env acts for a policy of
its own. A rollout worker on a loop of its own, with stand-ins for each policy's inference worker (they answer with
their policy's id as every action) and batcher: what each policy is asked, what each batcher gets, and when envs
step."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from sf.cfg.arguments import default_cfg
from sf.envs import register_env
from sf.runner.build import build_buffers, make_rollout_worker, probe_env
from sf.runtime.event_loop import Component, EventLoop
from sf.runtime.messages import Actions, LearnerVersion, PolicyRequest, Release, Trajectories
from sf.runtime.multi_agent_worker import MultiAgentRolloutWorker
from sf.utils.roles import RUNNER, Role, batcher_name, inference_worker_name, policy_queue_name, rollout_worker_name
from sf_examples.multi_agent.cue_duel import CueDuel

POLICIES, ROLLOUT, EPISODE = 3, 8, 8


class Inference(Component):
    """Policy `policy`'s inference: writes the policy's id as the action of every row it is asked for; while
    `held`, it keeps the requests and answers them on `release()`."""

    role = Role.INFERENCE_WORKER

    def __init__(self, policy: int, worker: MultiAgentRolloutWorker):
        super().__init__(inference_worker_name(policy, 0))
        self.policy, self.worker = policy, worker
        self.held, self.waiting, self.asked = False, [], []

    def _on_request(self, msg: PolicyRequest) -> None:
        worker = self.worker
        for row in msg.slots:  # every row asked for belongs to a seat that acts for this policy now
            env = next(i for i in range(worker.num_envs) if worker.slot[i] <= row < worker.slot[i] + 2)
            self.asked.append(worker.agent_policy[env * 2 + row - worker.slot[env]])
        worker.buffers.np["actions"][msg.slots, msg.steps] = self.policy
        worker.buffers.np["policy_version"][msg.slots, msg.steps] = self.policy
        self.waiting.append(msg)
        if not self.held:
            self.release()

    def release(self) -> None:
        for msg in self.waiting:
            self.send(rollout_worker_name(msg.worker), Actions([msg.split], self.policy, [msg.seq]))
        self.waiting = []


class Batcher(Component):
    """Policy `policy`'s batcher: keeps the trajectories it gets and gives their slots back at once."""

    role = Role.BATCHER

    def __init__(self, policy: int, worker: MultiAgentRolloutWorker):
        super().__init__(batcher_name(policy))
        self.policy, self.worker, self.actions = policy, worker, []

    def _on_trajectories(self, msg: Trajectories) -> None:
        self.actions += [self.worker.buffers.np["actions"][slot, :ROLLOUT].copy() for slot in msg.slots]
        self.send(rollout_worker_name(msg.worker), Release(list(msg.slots)))

    def _on_learner_version(self, msg: LearnerVersion) -> None:
        pass


def make_duel(name, cfg, env_config, render_mode=None):
    return CueDuel(episode_len=EPISODE)


@pytest.fixture
def duel():
    register_env("cue_duel_test", make_duel)
    cfg = default_cfg(
        env="cue_duel_test",
        use_rnn=False,
        num_policies=POLICIES,
        rollout=ROLLOUT,
        batch_size=16,
        num_workers=1,
        num_envs_per_worker=4,
        worker_num_splits=1,
        seed=5,
        decorrelate_envs_on_one_worker=False,
    )
    worker = make_rollout_worker(cfg, 0, build_buffers(cfg, probe_env(cfg), 4, shared=False))
    loop = EventLoop(routes={RUNNER: queue.Queue()})
    loop.add(worker)
    inference = [Inference(p, worker) for p in range(POLICIES)]
    batchers = [Batcher(p, worker) for p in range(POLICIES)]
    for p in range(POLICIES):
        loop.add(inference[p], aliases=(policy_queue_name(p),))
        loop.add(batchers[p])
    loop.flushing = []  # what the loop sets as it runs; here the test delivers the messages
    worker.on_start()
    yield worker, loop, inference, batchers
    worker.on_stop()


def run(loop: EventLoop, deliveries: int) -> None:
    for _ in range(deliveries):
        if not loop.local:
            return
        loop._drain_local()


def test_each_seat_acts_for_its_own_policy_and_each_batcher_gets_only_its_own(duel):
    worker, loop, inference, batchers = duel
    assert worker.mixing
    run(loop, 3000)
    for p in range(POLICIES):
        assert inference[p].asked and set(inference[p].asked) == {p}  # asked only for the seats acting for it
        assert batchers[p].actions, f"policy {p} got no trajectory"
        assert all((actions == p).all() for actions in batchers[p].actions)  # every step of them its own
    # and every finished trajectory went to a batcher: one per seat of each env's finished rollouts, less those
    # still waiting for their bootstrap value
    waiting = sum(pending >= 0 for pending in worker.pending)
    assert sum(len(b.actions) for b in batchers) == 2 * (sum(worker.done_count) - waiting)


def test_an_env_steps_once_every_policy_of_its_seats_answered(duel):
    worker, loop, inference, _ = duel
    inference[1].held = True
    run(loop, 200)
    mixed = [i for i in range(4) if 1 in worker.agent_policy[2 * i : 2 * i + 2]]
    assert mixed, "no env has a seat of policy 1 at the start"
    steps = [env.env._steps for env in worker.envs]
    assert all(steps[i] == 0 for i in mixed)  # waiting for policy 1's actions
    assert all(steps[i] > 0 for i in range(4) if i not in mixed)  # the others play on
    inference[1].held = False
    inference[1].release()
    run(loop, 50)
    assert all(env.env._steps > 0 for env in worker.envs)


def test_seats_change_policies_between_trajectories_and_an_envs_seats_meet_other_policies(duel):
    worker, loop, _, _ = duel
    seen = {k: {worker.agent_policy[k]} for k in range(8)}
    pairs = set()
    for _ in range(400):
        run(loop, 10)
        for k in range(8):
            seen[k].add(worker.agent_policy[k])
        pairs |= {(worker.agent_policy[2 * i], worker.agent_policy[2 * i + 1]) for i in range(4)}
    assert all(len(policies) > 1 for policies in seen.values())  # every seat has acted for several policies
    assert any(a != b for a, b in pairs) and any(a == b for a, b in pairs)  # against others and against itself


def test_without_mixing_an_envs_seats_act_for_one_policy():
    register_env("cue_duel_test", make_duel)
    cfg = default_cfg(env="cue_duel_test", num_policies=2, pbt_mix_policies_in_one_env=False, use_rnn=False)
    worker = make_rollout_worker(cfg, 0, build_buffers(cfg, probe_env(cfg), 4, shared=False))
    EventLoop(routes={policy_queue_name(p): queue.Queue() for p in range(2)}).add(worker)
    worker.on_start()
    try:
        assert not worker.mixing
        pairs = np.array(worker.agent_policy).reshape(-1, 2)
        assert (pairs[:, 0] == pairs[:, 1]).all()
    finally:
        worker.on_stop()
