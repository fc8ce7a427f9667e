"""What the policy sees at the start of a run: stacked frames (--env_framestack) and decorrelated envs
(--decorrelate_envs_on_one_worker, --decorrelate_experience_max_seconds)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from sf.cfg.arguments import default_cfg
from sf.envs import EnvAdapter, register_env
from sf.runner.build import build_buffers, probe_env
from sf.runtime.event_loop import Component, EventLoop
from sf.runtime.messages import PolicyRequest
from sf.runtime.rollout_worker import RolloutWorker
from sf.utils.roles import policy_queue_name

EPISODE = 20


class StepCounter(gymnasium.Env):
    """Observes the number of steps taken in the current episode; episodes last EPISODE steps."""

    observation_space = spaces.Box(0, EPISODE, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        self.t = 0
        self.total_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        self.total_steps += 1
        return np.array([float(self.t)], np.float32), 0.0, self.t == EPISODE, False, {}


class TimeLimitedStepCounter(StepCounter):
    """The same, registered as an env whose time limit (12 steps) comes before its own episode end."""

    spec = gymnasium.envs.registration.EnvSpec("TimeLimitedStepCounter-v0", max_episode_steps=12)


register_env("step_counter", lambda name, cfg, env_config, render_mode=None: StepCounter())
register_env("step_counter_12", lambda name, cfg, env_config, render_mode=None: TimeLimitedStepCounter())


# --- frame stacking ------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 4])
def test_framestack_matches_gymnasium_frame_stacking(k):
    """Oldest first, the reset observation repeated: what gymnasium's FrameStackObservation returns, flattened."""
    ours = EnvAdapter(gymnasium.make("CartPole-v1"), framestack=k)
    reference = gymnasium.wrappers.FrameStackObservation(gymnasium.make("CartPole-v1"), k, padding_type="reset")
    assert ours.obs_spec == {"obs": ((4 * k,), np.dtype(np.float32))}
    expected, _ = reference.reset(seed=3)
    assert np.array_equal(ours.reset(seed=3)["obs"], np.asarray(expected).reshape(-1))
    rng = np.random.default_rng(0)
    for _ in range(30):
        action = int(rng.integers(2))
        obs, _, terminated, truncated, _ = ours.step(np.array([action], np.float32))
        expected, _, ref_terminated, _, _ = reference.step(action)
        assert np.array_equal(obs["obs"], np.asarray(expected).reshape(-1))
        assert terminated == ref_terminated
        if terminated or truncated:
            break


def test_framestack_stacks_images_along_the_channel_axis():
    class Pixels(gymnasium.Env):
        observation_space = spaces.Box(0, 255, (6, 5, 3), np.uint8)  # HWC, converted to CHW by the adapter
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.zeros((6, 5, 3), np.uint8), {}

        def step(self, action):
            self.t += 1
            return np.full((6, 5, 3), self.t, np.uint8), 0.0, False, False, {}

    env = EnvAdapter(Pixels(), framestack=3)
    assert env.obs_spec == {"obs": ((9, 6, 5), np.dtype(np.uint8))}
    env.reset()
    env.step(np.array([0], np.float32))
    obs = env.step(np.array([0], np.float32))[0]["obs"]
    assert [int(obs[c].max()) for c in range(0, 9, 3)] == [0, 1, 2]  # frames oldest first, 3 channels each


def test_framestack_reaches_the_buffers_and_the_model():
    cfg = default_cfg(env="step_counter", env_framestack=3, use_rnn=False, num_workers=1, num_envs_per_worker=2)
    info = probe_env(cfg)
    assert info.obs_spec == {"obs": ((3,), np.dtype(np.float32))}
    assert build_buffers(cfg, info, 0, shared=False).obs["obs"].shape[2:] == (3,)


# --- decorrelation at start ----------------------------------------------------------------------------


class _Requests(Component):
    def __init__(self):
        super().__init__("requests")
        self.handlers = {PolicyRequest: lambda msg: None}


def _started_worker(worker_idx: int = 0, env: str = "step_counter", **flags) -> RolloutWorker:
    cfg = default_cfg(
        env=env,
        use_rnn=False,
        serial_mode=True,
        rollout=8,
        batch_size=64,
        num_envs_per_worker=4,
        worker_num_splits=2,
        **flags,
    )
    info = probe_env(cfg)
    worker = RolloutWorker(cfg, worker_idx, build_buffers(cfg, info, 0, shared=False))
    loop = EventLoop()
    loop.add(worker)
    loop.add(_Requests(), aliases=(policy_queue_name(0),))
    worker.on_start()
    return worker


def test_envs_of_one_worker_start_apart_by_one_rollout_each():
    worker = _started_worker(num_workers=1, seed=1)
    steps = [env.env.total_steps for env in worker.envs]
    assert steps == [0, 8, 16, 24]  # env i: i * rollout random steps
    first_obs = worker.buffers.obs_np["obs"][worker.slot, 0, 0].tolist()
    assert first_obs == [float(s % EPISODE) for s in steps]  # episodes of 20 steps reset on the way
    assert worker.ep_return == [0.0] * 4 and worker.ep_len == [0] * 4  # nothing counted


def test_decorrelation_wraps_at_the_time_limit():
    """Past the time limit the same reset phase comes sooner: env i takes (i * rollout) mod limit random steps."""
    worker = _started_worker(env="step_counter_12", num_workers=1, seed=1)
    assert [env.env.total_steps for env in worker.envs] == [0, 8, 16 % 12, 24 % 12]


def test_by_truncation_the_first_episode_ends_early_instead():
    """With a 12-step limit and --decorrelate_by_truncation, env i's first episode is truncated (i * rollout) mod 12
    steps early: the resets come on the schedule random steps would give, and nothing is simulated before the
    first trained step."""
    worker = _started_worker(env="step_counter_12", num_workers=1, seed=1, decorrelate_by_truncation=True)
    assert [env.env.total_steps for env in worker.envs] == [0, 0, 0, 0]
    first_end = []
    for env in worker.envs:
        for t in range(1, 40):
            _, _, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
            if terminated or truncated:
                first_end.append((t, truncated))
                break
    # env 0 and env 3 (24 mod 12 = 0) are in phase with no cut: their first end is the env's own, at 20 steps
    assert first_end == [(EPISODE, False), (12 - 8, True), (12 - 16 % 12, True), (EPISODE, False)]
    env = worker.envs[1]
    env.reset()
    assert [env.step(np.zeros(1, np.float32))[3] for _ in range(EPISODE)].count(True) == 0  # cut once only


def test_decorrelation_can_be_turned_off():
    worker = _started_worker(num_workers=1, decorrelate_envs_on_one_worker=False)
    assert [env.env.total_steps for env in worker.envs] == [0, 0, 0, 0]


def test_workers_start_spread_over_decorrelate_experience_max_seconds():
    last = _started_worker(worker_idx=1, num_workers=2, decorrelate_experience_max_seconds=1)
    first = _started_worker(worker_idx=0, num_workers=2, decorrelate_experience_max_seconds=1)
    assert 0.5 <= last.timing.to_dict()["wait_decorrelation"]["time"] < 1.5  # worker 1 of 2 waits 1/2 of 1 s
    assert "wait_decorrelation" not in first.timing.to_dict()
