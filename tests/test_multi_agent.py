"""Multi-agent envs (Sample Factory's API and PettingZoo's): each agent's rows of the buffers, masking of inactive
agents, per-agent episodes and frames; and a run as a Sample Factory script makes it, with observers and extra
episode statistics."""

from __future__ import annotations

import json
import math
import queue
import re
import sys

import gymnasium
import numpy as np
import pytest
import torch
from conftest import ROOT, read_scalars, run_sf
from gymnasium import spaces
from test_learner import T, hand_built_batch, train_once

from sf.bench.ceiling import random_actions, round_stepper
from sf.cfg.arguments import default_cfg
from sf.envs import EnvAdapter, register_env
from sf.envs.gym_family import register_gym_env
from sf.envs.multi_agent import MultiAgentAdapter, MultiAgentEnvError, multi_agent_info, open_env
from sf.envs.pettingzoo_env import PettingZooEnv
from sf.envs.spaces import UnsupportedSpaceError
from sf.envs.training_info import TrainingInfoInterface, find_training_info_interface
from sf.experiment.folder import Experiment
from sf.runner.build import build_buffers, make_rollout_worker, probe_env
from sf.runner.runner import Runner
from sf.runtime.event_loop import EventLoop
from sf.runtime.messages import SaveBest, TrainingInfo
from sf.runtime.multi_agent_worker import MultiAgentRolloutWorker
from sf.utils.errors import ConfigError
from sf.utils.roles import RUNNER, learner_name, policy_queue_name, rollout_worker_name

EPISODE = (3, 4)  # agent 0's episodes end (terminated) after 3 steps, agent 1's (truncated) after 4


class TwoClocks(gymnasium.Env, TrainingInfoInterface):
    """Two agents on clocks of their own: agent a observes (its step in its episode, a, the env's step) and earns
    10 * a + that step; agent 0 is terminated every 3 steps, agent 1 truncated every 4, each reset by the env on the
    spot; agent 1 sits out the step after its 2nd of every episode. Episode ends carry a true objective and extra
    stats."""

    observation_space = spaces.Box(0.0, 1000.0, (3,), np.float32)
    action_space = spaces.Discrete(3)
    num_agents = 2
    is_multiagent = True

    def __init__(self):
        TrainingInfoInterface.__init__(self)
        self.k, self.n, self.received = [0, 0], 0, []

    def _obs(self):
        return [np.array([self.k[a], a, self.n], np.float32) for a in range(2)]

    def reset(self, *, seed=None, options=None):
        self.k, self.n = [0, 0], 0
        return self._obs(), [{}, {}]

    def step(self, actions):
        self.received.append([int(a) for a in actions])
        self.n += 1
        self.k = [k + 1 for k in self.k]
        rewards = [10.0 * a + self.k[a] for a in range(2)]
        terminated, truncated = [self.k[0] == EPISODE[0], False], [False, self.k[1] == EPISODE[1]]
        infos = [{}, {"is_active": self.k[1] != 2}]
        for a in range(2):
            if terminated[a] or truncated[a]:
                infos[a].update(true_objective=float(a), episode_extra_stats={"agent": a, "steps": self.k[a]})
                self.k[a] = 0
        return self._obs(), rewards, terminated, truncated, infos


def _two_clocks(name, cfg, env_config, render_mode=None):
    return TwoClocks()


@pytest.fixture
def worker():
    register_env("two_clocks", _two_clocks)
    cfg = default_cfg(
        env="two_clocks",
        use_rnn=False,
        serial_mode=True,
        rollout=4,
        batch_size=16,
        num_workers=1,
        num_envs_per_worker=2,
        worker_num_splits=1,
        seed=3,
        decorrelate_envs_on_one_worker=False,
    )
    worker = make_rollout_worker(cfg, 0, build_buffers(cfg, probe_env(cfg), 4, shared=False))
    EventLoop(routes={policy_queue_name(0): queue.Queue(), RUNNER: queue.Queue()}).add(worker)
    worker.on_start()
    yield worker
    worker.on_stop()


def test_an_env_is_multi_agent_as_sample_factory_reads_it():
    class Plain:  # no gymnasium.Env: its own attributes count
        num_agents = 3
        is_multiagent = True

    assert multi_agent_info(Plain()) == (True, 3)
    assert multi_agent_info(gymnasium.make("CartPole-v1")) == (False, 1)
    one = TwoClocks()
    one.num_agents = 1  # a multi-agent env of one agent keeps the multi-agent API
    assert multi_agent_info(one) == (True, 1)
    Plain.is_multiagent = False
    with pytest.raises(MultiAgentEnvError, match="num_agents=3 must be multi-agent"):
        multi_agent_info(Plain())
    register_env("two_clocks", _two_clocks)
    register_gym_env("CartPole-v1")
    assert isinstance(open_env(default_cfg(env="two_clocks")), MultiAgentAdapter)
    assert isinstance(open_env(default_cfg(env="CartPole-v1")), EnvAdapter)


def test_the_adapter_steps_every_agent_and_names_a_list_of_the_wrong_length():
    env = TwoClocks()
    adapter = MultiAgentAdapter(env, 2)
    obs = adapter.reset(seed=1)
    assert [o["obs"].tolist() for o in obs] == [[0, 0, 0], [0, 1, 0]]
    obs, rewards, terminated, truncated, infos = adapter.step(np.array([[2.0], [1.0]], np.float32))
    assert env.received == [[2, 1]] and rewards == [1.0, 11.0] and infos[1] == {"is_active": True}
    assert adapter.obs_spec == {"obs": ((3,), np.dtype(np.float32))} and adapter.action_spec.discrete_sizes == (3,)
    env.step = lambda actions: ([np.zeros(3)] * 3, [0.0] * 2, [False] * 2, [False] * 2, [{}] * 2)
    with pytest.raises(MultiAgentEnvError, match="num_agents=2 returned 3 observations"):
        adapter.step(np.zeros((2, 1), np.float32))
    stacked = MultiAgentAdapter(TwoClocks(), 2, framestack=2)
    stacked.reset()
    first = [o["obs"].copy() for o in stacked.step(np.zeros((2, 1), np.float32))[0]]
    assert first[1].tolist() == [0, 1, 0, 1, 1, 1]  # agent 1's own frames: the reset one, then the new one


def test_the_env_benchmark_counts_a_frame_per_agent():
    """The simulator ceiling's round steps each env once, every agent with an action of its own, and counts each
    agent's frame, as training counts them."""
    envs = [MultiAgentAdapter(TwoClocks(), 2) for _ in range(3)]
    for env in envs:
        env.reset()
    actions = random_actions(envs[0].action_spec, 16, np.random.default_rng(0))
    step_round = round_stepper(envs, actions)
    assert step_round(5) == 6
    assert [env.env.received for env in envs] == [[actions[5 + k : 7 + k, 0].astype(int).tolist()] for k in range(3)]
    register_gym_env("CartPole-v1")
    single = [open_env(default_cfg(env="CartPole-v1")) for _ in range(2)]
    for env in single:
        env.reset(seed=0)
    assert round_stepper(single, random_actions(single[0].action_spec, 16, np.random.default_rng(0)))(0) == 2


def _play(worker: MultiAgentRolloutWorker, steps: int) -> TwoClocks:
    """Step env 0 and env 1 of the worker `steps` times with actions (env + step + agent) % 3, RNN states all 1."""
    b = worker.buffers
    b.np["rnn_states"][:] = 1.0
    for step in range(steps):
        for i in range(2):
            for a in range(2):
                b.np["actions"][worker.slot[i] + a, worker.t[i]] = (i + step + a) % 3
        worker._step_envs([0, 1], 0)
    return worker.envs[0].env


def test_each_agent_fills_its_own_rows(worker):
    assert isinstance(worker, MultiAgentRolloutWorker)
    s = worker.slot[0]
    assert worker.slot[1] == s + 2  # each env's agents take consecutive slots
    env = _play(worker, 3)
    b = worker.buffers
    k = [[1, 2, 3], [1, 2, 3]]  # each agent's step in its episode at steps 0..2
    for a in range(2):
        expected_obs = [[0, a, 0]] + [[k[a][t] % EPISODE[a], a, t + 1] for t in range(3)]
        assert b.obs_np["obs"][s + a, :4].tolist() == expected_obs
        assert b.np["rewards"][s + a, :3].tolist() == [10.0 * a + k[a][t] for t in range(3)]
    assert env.received == [[(0 + t + a) % 3 for a in range(2)] for t in range(3)]
    assert b.np["dones"][s, :3].tolist() == [0, 0, 1] and b.np["dones"][s + 1, :3].tolist() == [0, 0, 0]
    assert b.np["time_outs"][s, :3].tolist() == [0, 0, 0]  # agent 0 was terminated, not cut
    assert b.np["rnn_states"][s, 3, 0] == 0.0 and b.np["rnn_states"][s + 1, 3, 0] == 1.0  # only the ended agent's
    slots, steps = worker._rows([0, 1], 0)
    assert slots == [s, s + 1, s + 2, s + 3] and steps == [3, 3, 3, 3]


def test_an_inactive_agent_is_marked_and_episodes_are_each_agents(worker):
    _play(worker, 4)  # rollout 4: the trajectory completed, env 0 went on in a new slot group
    b, old = worker.buffers, worker.pending[0]
    # agent 1 said is_active False after its 2nd step: its 3rd (step 2) is inactive; it was cut after its 4th
    assert b.np["active"][old, :4].tolist() == [True] * 4
    assert b.np["active"][old + 1, :4].tolist() == [True, True, False, True]
    assert b.np["time_outs"][old + 1, :4].tolist() == [0, 0, 0, 1]
    episodes = worker.episodes[0]
    agent0 = [e for e in episodes if e[2] == 0.0]
    agent1 = [e for e in episodes if e[2] == 1.0]
    assert agent0 == [(6.0, 3, 0.0, {"agent": 0.0, "steps": 3.0})] * 2  # one per env; 1 + 2 + 3
    assert agent1 == [(50.0, 4, 1.0, {"agent": 1.0, "steps": 4.0})] * 2  # 11 + 12 + 13 + 14


def test_envs_hear_how_far_training_got_at_their_episodes_ends(worker):
    """Sample Factory's TrainingInfoInterface: the runner's last frame count, given at an episode's end."""
    worker._on_training_info(TrainingInfo({0: 1234}))
    env = _play(worker, 2)
    assert env.training_info == {}  # no episode has ended yet
    _play(worker, 1)  # agent 0's first episode ends
    assert env.training_info == {"policy_id": 0, "approx_total_training_steps": 1234, "reward_shaping": None}

    class Curriculum(gymnasium.Wrapper, TrainingInfoInterface):
        def __init__(self, env):
            gymnasium.Wrapper.__init__(self, env)
            TrainingInfoInterface.__init__(self)

    wrapped = gymnasium.wrappers.TimeLimit(Curriculum(gymnasium.make("CartPole-v1")), 10)
    assert find_training_info_interface(wrapped) is wrapped.env  # found on the way down to the unwrapped env
    assert find_training_info_interface(gymnasium.make("CartPole-v1")) is None


def test_the_runner_tells_every_rollout_worker_how_far_training_got(tmp_path):
    cfg = default_cfg(env="cooperative_cue", train_dir=str(tmp_path), num_workers=3)
    runner = Runner(cfg, Experiment(cfg))
    routes = {rollout_worker_name(w): queue.Queue() for w in range(3)}
    EventLoop(routes=routes).add(runner)
    runner.progress.on_learner_stats(0, 4096, 3, {}, now=1.0)
    runner.report()
    sent = [(dest, msg) for _, dest, msg in runner.loop.outbox]
    assert sent == [(rollout_worker_name(w), TrainingInfo({0: 4096})) for w in range(3)]
    runner.experiment.close()


def test_an_env_group_continues_hands_over_and_comes_back_whole(worker):
    _play(worker, 4)
    b, old, new = worker.buffers, worker.pending[0], worker.slot[0]
    assert new != old and new % 2 == old % 2
    np.testing.assert_array_equal(b.obs_np["obs"][new : new + 2, 0], b.obs_np["obs"][old : old + 2, 4])
    b.np["values"][new : new + 2, 0] = [7.0, 8.0]
    finished: dict[int, list[int]] = {}
    worker._hand_over(0, finished)
    assert finished == {0: [old, old + 1]} and b.np["values"][old : old + 2, 4].tolist() == [7.0, 8.0]
    assert b.np["traj_time"][old + 1].tolist() == b.np["traj_time"][old].tolist()
    free = len(worker.free)
    assert worker._reusable([old + 1]) == [] and len(worker.free) == free  # half a group is not free yet
    assert worker._reusable([new, old]) == [old]  # the rest of the group: free again as one


def test_inactive_steps_are_masked_as_stale_ones_are(tmp_path):
    """Inactive agents' steps, whatever they hold, leave the update where the same steps left out for their policy
    lag leave it (the learner's one mask, as Sample Factory's)."""
    active = torch.tensor([[True] * T, [False] * T, [True] * T, [False, False, True, True]])

    def inactive(model):
        batch = hand_built_batch(model, versions=(5, 5, 5, 5))
        batch["active"] = active
        batch["rewards"][~active] = 1e3  # nothing of an inactive step counts
        batch["log_prob"][~active] = -50.0
        return batch

    def stale(model):
        return hand_built_batch(model, versions=(5, 0, 5, (0, 0, 5, 5)))

    masked = train_once(tmp_path / "a", inactive, "--max_policy_lag=5", "--learning_rate=1e-3")
    lagged = train_once(tmp_path / "b", stale, "--max_policy_lag=5", "--learning_rate=1e-3")
    for (name, a), b in zip(masked.named_parameters(), lagged.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)


class Tag:
    """A PettingZoo parallel env by its API alone: `b` is caught at step 2 and leaves, the episode is cut at 4."""

    possible_agents = ["a", "b"]
    metadata: dict = {}

    def __init__(self, render_mode=None):
        self.render_mode, self.agents, self.t, self.received = render_mode, [], 0, []

    def observation_space(self, agent):
        return spaces.Box(0.0, 10.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self, agents):
        return {agent: np.array([self.t, self.possible_agents.index(agent)], np.float32) for agent in agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(self.agents), {agent: {} for agent in self.agents}

    def step(self, actions):
        self.received.append(dict(actions))
        self.t += 1
        rewards = {agent: 1.0 + (agent == "b") for agent in self.agents}
        terminated = {agent: agent == "b" and self.t == 2 for agent in self.agents}
        truncated = {agent: self.t == 4 for agent in self.agents}
        obs = self._obs(self.agents)
        infos = {agent: {} for agent in self.agents}
        self.agents = [agent for agent in self.agents if not (terminated[agent] or truncated[agent])]
        return obs, rewards, terminated, truncated, infos

    def close(self):
        pass


def test_pettingzoo_agents_that_leave_are_inactive_until_the_episode_ends():
    env = PettingZooEnv(Tag())
    assert env.num_agents == 2 and env.is_multiagent
    obs, infos = env.reset(seed=0)
    assert [o.tolist() for o in obs] == [[0, 0], [0, 1]] and [i["is_active"] for i in infos] == [True, True]
    steps = [env.step([1, 1]) for _ in range(4)]
    assert env.env.received == [{"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 1}, {"a": 1}]  # b gets no more actions
    assert [s[1] for s in steps] == [[1.0, 2.0], [1.0, 2.0], [1.0, 0.0], [1.0, 0.0]]
    assert [s[4][1]["is_active"] for s in steps] == [True, False, False, True]  # b sits out, back after the reset
    assert steps[2][0][1].tolist() == [2, 1]  # b's last observation stands while it is out
    assert [(s[2], s[3]) for s in steps[:3]] == [([False, False], [False, False])] * 3
    assert (steps[3][2], steps[3][3]) == ([False, True], [True, False])  # each agent's own end, on one step
    assert [o.tolist() for o in steps[3][0]] == [[0, 0], [0, 1]]  # the env reset itself


def test_pettingzoo_agents_must_share_their_spaces():
    class Mixed(Tag):
        def action_space(self, agent):
            return spaces.Discrete(2 if agent == "a" else 3)

    with pytest.raises(UnsupportedSpaceError, match="share one action space: a has Discrete\\(2\\), b has"):
        PettingZooEnv(Mixed())


def test_pettingzoo_flags_fail_with_one_line(tmp_path):
    base = ["--serial_mode=True", f"--train_dir={tmp_path}", "--experiment=pz"]
    module = "sf_examples.pettingzoo.train_pettingzoo"
    missing = run_sf(["--env=pettingzoo:no_such_package.env_v0", *base], module=module, timeout=120)
    assert missing.returncode == 2
    assert "--env: cannot import 'no_such_package.env_v0'" in missing.stderr and "sf[pettingzoo]" in missing.stderr
    bad = run_sf(["--env=pettingzoo:pettingzoo.classic.rps_v2", "--pettingzoo_kwargs=[1]", *base], module=module)
    assert bad.returncode == 2 and "--pettingzoo_kwargs" in bad.stderr and "JSON object" in bad.stderr
    assert not (tmp_path / "pz").exists()


def test_sync_mode_needs_whole_rounds_of_agents():
    register_env("two_clocks", _two_clocks)
    cfg = default_cfg(env="two_clocks", async_rl=False, batch_size=96, rollout=32, num_batches_per_epoch=1)
    with pytest.raises(ConfigError, match="3 trajectories\\) must be a multiple of 2"):
        probe_env(cfg)


# a run as a Sample Factory script makes it ------------------------------------------------------------------------
def observed_run(tmp_path, *flags: str) -> tuple[dict, dict, str]:
    import subprocess

    result = subprocess.run(
        [sys.executable, "tests/observed_run.py", "--env=cooperative_cue_resting", f"--train_dir={tmp_path}"]
        + ["--experiment=observed", "--train_for_env_steps=4096", "--num_workers=2", "--seed=1", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    exp = tmp_path / "observed"
    return json.loads((exp / "observed.json").read_text()), json.loads((exp / "summary.json").read_text()), exp


@pytest.fixture(scope="module")
def serial_observed(tmp_path_factory):
    return observed_run(tmp_path_factory.mktemp("observed"), "--serial_mode=True")


def check_observed_run(seen: dict, summary: dict, exp) -> None:
    calls = seen["calls"]
    assert calls[:3] == ["on_init", "on_connect_components", "on_start"] and calls.count("on_stop") == 1
    assert seen["frames_at_on_init"] == 0 and seen["thread"] == "MainThread"
    assert seen["iterations"] == list(range(1, len(seen["iterations"]) + 1)) and len(seen["iterations"]) >= 8
    assert "extra_summaries" in calls and seen["summaries"][-1][0] == 0
    assert seen["avg_stats_keys"] == ["accuracy", "len", "reward", "true_objective"]
    episode = seen["last_episode"]
    assert episode["policy_id"] == 0 and set(episode["episodic"]) == {
        "reward",
        "len",
        "true_objective",
        "episode_extra_stats",
    }
    assert episode["episodic"]["len"] == 20 and 0 <= episode["episodic"]["episode_extra_stats"]["accuracy"] <= 1
    # every agent's steps are frames and every agent's episodes are episodes: 2 agents of 20-step episodes
    frames = summary["env_frames"]["0"]
    assert frames >= 4096 and summary["num_episodes"] == seen["episodes"]
    in_flight = 2 * 8 * 2 * 3 * 32  # workers x envs x agents x slots per agent x rollout: collected, not yet trained
    assert frames - 20 <= summary["num_episodes"] * 20 <= frames + in_flight
    assert summary["status"] == "ok" and 0 <= summary["episode_extra_stats"]["0"]["accuracy"] <= 1
    assert summary["avg_true_objective"]["0"] is not None
    scalars = read_scalars(exp)
    # the second agent rests 5 steps of every 20: 1/8 of all steps are masked
    assert np.mean(scalars["train/valids_fraction"]) == pytest.approx(7 / 8, abs=0.03)
    assert "policy_stats/avg_accuracy" in scalars and "policy_stats/avg_true_objective_max" in scalars
    assert "custom/accuracy_seen" in scalars


def test_a_serial_multi_agent_run_with_observers(serial_observed):
    seen, summary, exp = serial_observed
    check_observed_run(seen, summary, exp)
    runner = json.loads((exp / "profile.json").read_text())["Runner"]["tree"]
    hooks = runner["main_loop"]["children"]["observers"]["children"]
    assert {"on_init", "on_connect_components", "on_start", "on_training_step"} <= set(hooks)
    assert "on_stop" in runner["observers"]["children"]  # after the loop, once the components stopped


def test_the_profile_tools_read_a_multi_agent_run(serial_observed):
    """The report and the live view take the run's frames as it counts them, every agent's."""
    from sf.analysis.cli import run_report
    from sf.analysis.run_data import load_experiment
    from sf.analysis.top import ReplaySource, frame_text

    _, summary, exp = serial_observed
    frames = summary["env_frames"]["0"]
    assert load_experiment(exp).frames == frames
    assert re.search(r"^verdict: [a-z]+-bound", run_report(exp), re.M)
    view = frame_text(ReplaySource(exp, speed=1.0, at=math.inf).frame(4.0), height=30)
    assert f"frames {frames:,}" in view


@pytest.mark.slow
def test_a_parallel_multi_agent_run_with_observers(tmp_path):
    seen, summary, exp = observed_run(tmp_path, "--serial_mode=False")
    check_observed_run(seen, summary, exp)
    assert seen["pid"] != json.loads((exp / "profile.json").read_text())["Learner 0"]["pid"]


@pytest.mark.parametrize("metric", ["accuracy", "true_objective", "coins"])
def test_the_best_policy_by_any_episode_statistic(tmp_path, caplog, metric):
    """--save_best_metric names an env's true objective or extra stat as it names the reward; one that no episode
    reports keeps no best policy and says so once."""
    cfg = default_cfg(env="cooperative_cue", train_dir=str(tmp_path), save_best_metric=metric, save_best_after=0)
    inbox = queue.Queue()
    runner = Runner(cfg, Experiment(cfg))
    EventLoop(routes={learner_name(0): inbox}).add(runner)
    runner.progress.on_learner_stats(0, 4096, 3, {}, now=1.0)
    runner.progress.on_episodes(0, [(5.0, 20, 2.0, {"accuracy": 0.25}), (9.0, 20, 4.0, {"accuracy": 0.75})])
    for _ in range(2):
        runner._request_save_best()
    sent = [msg for _, _, msg in runner.loop.outbox]
    expected = {"accuracy": 0.5, "true_objective": 3.0}
    if metric in expected:
        assert sent == [SaveBest(metric, expected[metric])] * 2
    else:
        said = [r.message for r in caplog.records if "--save_best_metric=coins" in r.message]
        assert sent == [] and len(said) == 1
        assert "no episode reports it" in said[0] and "reward, len, true_objective, accuracy" in said[0]
    runner.experiment.close()


def test_a_pettingzoo_run_is_named_after_its_env_unless_given_a_name():
    """Not the parser's shared `default_experiment`, where runs of different envs would resume one another."""
    from sf.envs.families import family_named

    family = family_named("pettingzoo")
    assert family.parse_cfg(["--env=pettingzoo:pettingzoo.classic.rps_v2"]).experiment == "rps_v2"
    assert family.parse_cfg(["--env=pettingzoo:pettingzoo.classic.rps_v2", "--experiment=mine"]).experiment == "mine"
