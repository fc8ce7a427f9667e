"""--env_threads: a rollout worker stepping its envs on several threads writes exactly what one thread writes."""

from __future__ import annotations

import os
import sys
import threading
import time

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from sf.cfg.arguments import default_cfg, parse_full_cfg
from sf.cfg.validate import validate_cfg
from sf.envs import register_env
from sf.runner.build import build_buffers, probe_env
from sf.runtime.event_loop import Component, EventLoop
from sf.runtime.messages import Episodes, PolicyRequest
from sf.runtime.rollout_worker import RolloutWorker
from sf.utils.errors import ConfigError
from sf.utils.roles import RUNNER, policy_queue_name

EPISODE = 3


class ThreadNoting(gymnasium.Env):
    """Observes (steps in the episode, last action, its own index); notes the thread of every step and sleeps in
    it (the GIL is released, as in a simulator's native code), so chunks on different threads overlap."""

    observation_space = spaces.Box(0, 100, (3,), np.float32)
    action_space = spaces.Discrete(3)
    threads: set[int] = set()

    def __init__(self, index: int):
        self.index, self.t = index, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 0.0, self.index], np.float32), {}

    def step(self, action):
        ThreadNoting.threads.add(threading.get_ident())
        time.sleep(0.001)
        self.t += 1
        obs = np.array([self.t, int(action), self.index], np.float32)
        return obs, float(self.t * (int(action) + 1)), self.t == EPISODE, False, {}


register_env("thread_noting", lambda name, cfg, env_config, render_mode=None: ThreadNoting(env_config.env_id))


class _Sink(Component):
    """Takes the worker's policy requests and, on stop, its episode statistics."""

    def __init__(self):
        super().__init__("sink")
        self.handlers = {PolicyRequest: lambda msg: None, Episodes: lambda msg: None}


def _worker(env_threads: int) -> RolloutWorker:
    cfg = default_cfg(
        env="thread_noting",
        use_rnn=False,
        serial_mode=True,
        rollout=8,
        batch_size=64,
        num_workers=1,
        num_envs_per_worker=6,
        worker_num_splits=1,
        seed=3,
        env_threads=env_threads,
        decorrelate_envs_on_one_worker=False,
    )
    worker = RolloutWorker(cfg, 0, build_buffers(cfg, probe_env(cfg), 0, shared=False))
    loop = EventLoop()
    loop.add(worker)
    loop.add(_Sink(), aliases=(policy_queue_name(0), RUNNER))
    worker.on_start()
    return worker


def _run(env_threads: int) -> tuple[dict[str, np.ndarray], set[int]]:
    ThreadNoting.threads = set()
    worker = _worker(env_threads)
    actions = worker.buffers.np["actions"]
    envs = list(range(worker.num_envs))
    for step in range(5):  # resets at step 3 of every env; no trajectory completes (rollout 8)
        for i in envs:
            actions[worker.slot[i], worker.t[i]] = (i + step) % 3
        worker._step_envs(envs, 0)
    written = {
        "obs": worker.buffers.obs_np["obs"].copy(),
        "ep_return": np.array(worker.ep_return),
        **{k: worker.buffers.np[k].copy() for k in ("rewards", "dones", "time_outs")},
    }
    pool = worker.env_pool
    worker.on_stop()
    assert pool is None or all(not t.is_alive() for t in pool._threads)  # the pool's threads end with the worker
    return written, ThreadNoting.threads


def test_three_threads_write_what_one_thread_writes():
    one, one_threads = _run(1)
    three, three_threads = _run(3)
    assert len(one_threads) == 1 and len(three_threads) == 3
    for key in one:
        np.testing.assert_array_equal(one[key], three[key], err_msg=key)
    assert one["dones"].sum() == 6  # every env ended an episode on the way and was reset


def test_env_threads_below_one_is_refused():
    with pytest.raises(ConfigError, match="env_threads"):
        validate_cfg(default_cfg(env="CartPole-v1", env_threads=-1))


def test_automatic_env_threads_take_every_core_in_a_serial_run_only(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)

    def threads(*flags: str) -> int:
        return parse_full_cfg(["--env=CartPole-v1", "--env_threads=0", "--num_envs_per_worker=8", *flags]).env_threads

    assert threads("--serial_mode=True") == 3
    assert threads("--serial_mode=True", "--worker_num_splits=4") == 2  # a chunk of at least one env per thread
    assert threads("--serial_mode=False") == 1  # worker processes already use the cores
    # a profiler that follows the main thread only would lose every step taken on the others
    assert threads("--serial_mode=True", "--profiling_backend=cprofile", "--profiling_worker_groups", "Learner") == 1
    previous = sys.getprofile()
    sys.setprofile(lambda frame, event, arg: None)
    try:
        assert threads("--serial_mode=True") == 1
    finally:
        sys.setprofile(previous)


def test_an_env_error_on_a_pool_thread_reaches_the_worker():
    """Env 5 steps in the third chunk, on a pool thread: its exception surfaces in the worker's own call, as it
    would with one thread, so the run ends with the env's error."""
    worker = _worker(3)

    def broken(action):
        raise ValueError("env 5 broke")

    worker.envs[5]._env_step = broken
    with pytest.raises(ValueError, match="env 5 broke"):
        worker._step_envs(list(range(worker.num_envs)), 0)
    worker.on_stop()
