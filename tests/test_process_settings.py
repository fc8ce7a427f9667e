"""Per-process OS settings: thread variables reach spawned children, priority and pinning are applied."""

from __future__ import annotations

import multiprocessing as mp
import os
import types

import pytest
import torch

from sf.utils.process_settings import THREAD_VARIABLES, apply_process_settings, thread_limits, worker_core


def _apply_and_report(
    queue, niceness: int, pin: bool, kind: str, index: int, env_threads: int, learner_priority: bool, async_rl: bool
) -> None:
    cfg = types.SimpleNamespace(
        keep_freed_memory=False,
        default_niceness=niceness,
        set_workers_cpu_affinity=pin,
        env_threads=env_threads,
        learner_priority=learner_priority,
        async_rl=async_rl,
    )
    apply_process_settings(cfg, kind, index)
    queue.put(
        {
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "cores": sorted(os.sched_getaffinity(0)),
            "torch_threads": torch.get_num_threads(),
        }
    )


def _probe(
    niceness: int,
    pin: bool,
    kind: str,
    index: int,
    env_threads: int = 1,
    learner_priority: bool = False,
    async_rl: bool = True,
) -> dict:
    """The settings a component process of `kind` ends up with, applied in a forked child (fast: torch is already
    imported) so this process keeps its own priority and cores."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(
        target=_apply_and_report, args=(queue, niceness, pin, kind, index, env_threads, learner_priority, async_rl)
    )
    child.start()
    seen = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    return seen


def _child_environment(queue) -> None:
    queue.put({name: os.environ.get(name) for name in THREAD_VARIABLES})


def test_thread_limits_reach_a_spawned_child_and_are_restored(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with thread_limits(True):
        child = ctx.Process(target=_child_environment, args=(queue,))
        child.start()
    seen = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert all(seen[name] == "1" for name in THREAD_VARIABLES)
    assert os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ
    with thread_limits(False):
        assert os.environ["OMP_NUM_THREADS"] == "7"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_rollout_worker_is_pinned_round_robin_and_reniced():
    lower = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 4)  # raising the nice value needs no privilege
    base = _probe(0, False, "learner", 0)
    pinned = _probe(lower, True, "rollout", 3)
    assert pinned["cores"] == [worker_core(3)]
    assert pinned["nice"] == lower
    assert base["cores"] == sorted(os.sched_getaffinity(0)) and base["nice"] == os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_a_worker_stepping_envs_on_two_threads_gets_two_cores():
    """Worker 1 with --env_threads=2 takes the cores of worker slots 2 and 3 (round robin over the allowed ones)."""
    pinned = _probe(0, True, "rollout", 1, env_threads=2)
    assert pinned["cores"] == sorted({worker_core(2), worker_core(3)})


def test_only_rollout_workers_are_pinned_and_serial_keeps_its_priority():
    everywhere = sorted(os.sched_getaffinity(0))
    lower = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)
    assert _probe(lower, True, "inference", 1) == {"nice": lower, "cores": everywhere, "torch_threads": 1}
    serial = _probe(lower, True, "serial", 0)
    assert serial == {"nice": os.getpriority(os.PRIO_PROCESS, 0), "cores": everywhere, "torch_threads": 1}


def test_worker_core_cycles_through_the_allowed_cores():
    cores = sorted(os.sched_getaffinity(0))
    assert [worker_core(i) for i in range(2 * len(cores))] == cores + cores


def test_learner_priority_puts_collection_five_nice_levels_below_the_learner():
    launched = os.getpriority(os.PRIO_PROCESS, 0)
    collection = min(19, launched + 5)
    for kind in ("rollout", "inference"):
        assert _probe(0, False, kind, 0, learner_priority=True)["nice"] == collection
    assert _probe(0, False, "learner", 0, learner_priority=True)["nice"] == launched
    assert _probe(0, False, "serial", 0, learner_priority=True)["nice"] == launched
    # on top of --default_niceness, which every component process takes first
    lower = min(19, launched + 2)
    assert _probe(lower, False, "rollout", 0, learner_priority=True)["nice"] == min(19, lower + 5)
    assert _probe(lower, False, "learner", 0, learner_priority=True)["nice"] == lower


def test_a_synchronous_runs_learner_trains_on_every_core():
    """Collection waits for the learner's weights in synchronous training; beside running collection, one thread."""
    cores = len(os.sched_getaffinity(0))
    assert _probe(0, False, "learner", 0, async_rl=False)["torch_threads"] == cores
    assert _probe(0, False, "learner", 0, async_rl=True)["torch_threads"] == 1
    assert _probe(0, False, "inference", 0, async_rl=False)["torch_threads"] == 1
