"""The simulator ceiling: every core stepping the layout's envs with random actions, nothing else.

The layout's envs (`--num_workers` x `--num_envs_per_worker`) are spread over as many processes as the layout has
rollout workers or the machine has cores, whichever is more, so a serial run's one process or a layout with fewer
workers than cores is still measured against the whole machine. Each process is started the way a rollout worker
is (spawn, one math thread, pinned round robin), creates its envs, and after all are ready steps them round robin
for a fixed time. No network, no inference, no learner: the FPS a framework could reach if its own cost were zero.
With `--envpool` each process steps its envs as one EnvPool, a split per call, as its rollout worker would. A
multi-agent env's step counts a frame per agent, as training counts them (and Sample Factory does). With
`--batched_sampling` each process steps its env objects, a split per call, and every copy's step is a frame: the
bare vectorized env with random actions.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sf.envs import EnvAdapter, EnvConfig
from sf.envs.batched import create_batched_envs
from sf.envs.families import EnvFamily
from sf.envs.multi_agent import MultiAgentAdapter, open_env
from sf.envs.registry import create_vector_env
from sf.envs.spaces import ActionSpec
from sf.envs.vector import VectorConfig
from sf.utils.process_settings import apply_process_settings, thread_limits

READY_TIMEOUT_S = 600.0  # env creation (a VizDoom engine per env) may take long on a loaded machine
CHECK_CLOCK_EVERY = 64  # env steps between clock reads


@dataclass(frozen=True)
class CeilingResult:
    fps: float  # env frames (after frameskip) per second, all processes together
    processes: int
    envs: int
    seconds: float


def random_actions(spec: ActionSpec, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` flat action vectors: uniform over each categorical entry, standard normal for continuous ones."""
    actions = np.empty((count, spec.flat_dim), dtype=np.float32)
    for j, size in enumerate(spec.discrete_sizes):
        actions[:, j] = rng.integers(0, size, count)
    start = len(spec.discrete_sizes)
    actions[:, start:] = rng.standard_normal((count, spec.continuous_dim))
    return actions


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def ceiling_processes(cfg, cores: int) -> int:
    """The layout's rollout worker processes (one in serial mode) or the cores, whichever are more; at most one
    per env."""
    total_envs = cfg.num_workers * cfg.num_envs_per_worker
    return min(total_envs, max(1 if cfg.serial_mode else cfg.num_workers, cores))


def _step_envs(cfg, family: EnvFamily, index: int, num_envs: int, seconds: float, go, results) -> None:
    """One process of the ceiling: create its envs, wait for the others, step for `seconds`, report frames."""
    # one thread on one core each, as a rollout worker of a parallel run
    apply_process_settings(Namespace(**{**vars(cfg), "env_threads": 1}), "rollout", index)
    family.register_envs(cfg.env)
    if cfg.envpool or cfg.batched_sampling:
        _step_vector_env(cfg, index, num_envs, seconds, go, results)
        return
    plain = Namespace(**{**vars(cfg), "env_framestack": 1})  # the simulator alone: no frame stacking
    envs = [open_env(plain, EnvConfig(index, i, index * num_envs + i)) for i in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=None if cfg.seed is None else cfg.seed * 100_003 + index * num_envs + i)
    step_round = round_stepper(envs, random_actions(envs[0].action_spec, 4096, np.random.default_rng(index)))
    try:
        _timed_rounds(step_round, envs[0].frameskip, index, seconds, go, results)
    finally:
        for env in envs:
            env.close()


def round_stepper(envs: list[EnvAdapter | MultiAgentAdapter], actions: np.ndarray) -> Callable[[int], int]:
    """`step_round(steps so far)`: step every env once with actions from `actions` (rows), resetting the envs whose
    episode ended, and return the frames it took before frameskip: one per env, or one per agent of a multi-agent
    env (which resets itself)."""
    if isinstance(envs[0], MultiAgentAdapter):
        agents = envs[0].num_agents
        rows = [actions[k : k + agents] for k in range(len(actions) - agents)]

        def step_agents(steps: int) -> int:
            for k, env in enumerate(envs):
                env.step(rows[(steps + k) % len(rows)])
            return len(envs) * agents

        return step_agents

    def step_round(steps: int) -> int:
        for k, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(actions[(steps + k) % len(actions)])
            if terminated or truncated:
                env.reset()
        return len(envs)

    return step_round


def _step_vector_env(cfg, index: int, num_envs: int, seconds: float, go, results) -> None:
    """The same with the process's envs in one vector env (EnvPool; batched env objects of many copies each),
    stepped a split at a time as a worker does."""
    make = create_batched_envs if cfg.batched_sampling else create_vector_env
    env = make(cfg.env, cfg, VectorConfig(index, num_envs, index * num_envs))
    env.reset()
    copies = getattr(env, "agents", 1)
    per_split = max(1, num_envs // cfg.worker_num_splits)
    groups = [np.arange(start, start + per_split, dtype=np.int32) for start in range(0, num_envs, per_split)]
    rows = per_split * copies
    actions = random_actions(env.action_spec, 4096 + rows, np.random.default_rng(index))

    def step_round(steps: int) -> int:
        for k, group in enumerate(groups):
            at = (steps + k * rows) % 4096
            env.step(group, actions[at : at + rows])
        return len(groups) * rows

    try:
        _timed_rounds(step_round, env.frameskip, index, seconds, go, results)
    finally:
        env.close()


def _timed_rounds(step_round, frameskip: int, index: int, seconds: float, go, results) -> None:
    """Say ready, wait for every other process, call `step_round(steps so far)` (it returns the env steps it took)
    for `seconds`, and report the frames and the time they took."""
    results.put(("ready", index))
    if not go.wait(timeout=READY_TIMEOUT_S):
        return
    steps, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(CHECK_CLOCK_EVERY):
            steps += step_round(steps)
        now = time.perf_counter()
        if now >= deadline:
            break
    results.put(("done", steps * frameskip, now - start))


def measure_ceiling(cfg, family: EnvFamily, seconds: float, cores: int | None = None) -> CeilingResult:
    """Start a process per rollout worker or per core (whichever are more; `cores` defaults to those this process
    may run on), step for `seconds` once all are ready, and sum their frame rates."""
    processes = ceiling_processes(cfg, cores or usable_cores())
    envs_each = -(-cfg.num_workers * cfg.num_envs_per_worker // processes)
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    results = ctx.Queue()
    procs = []
    try:
        for index in range(processes):
            proc = ctx.Process(
                target=_step_envs,
                args=(cfg, family, index, envs_each, seconds, go, results),
                name=f"ceiling_w{index}",
                daemon=True,
            )
            with thread_limits(cfg.force_envs_single_thread):
                proc.start()
            procs.append(proc)
        _collect(results, procs, "ready", READY_TIMEOUT_S)
        go.set()
        reports = _collect(results, procs, "done", seconds + READY_TIMEOUT_S)
    finally:
        go.set()
        for proc in procs:
            proc.join(timeout=10.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
    fps = sum(frames / elapsed for frames, elapsed in reports)
    return CeilingResult(fps=fps, processes=processes, envs=processes * envs_each, seconds=seconds)


def _collect(results, procs: list, kind: str, timeout: float) -> list[tuple]:
    """One `kind` message per process; a process that dies first fails the measurement at once."""
    got: list[tuple] = []
    deadline = time.monotonic() + timeout
    while len(got) < len(procs):
        try:
            message = results.get(timeout=0.5)
        except queue.Empty:
            dead = [p.name for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(
                    f"simulator ceiling: {', '.join(dead) or 'a worker'} "
                    f"{'failed' if dead else 'timed out'} before it was {kind}"
                ) from None
            continue
        if message[0] == kind:
            got.append(message[1:])
    return got
