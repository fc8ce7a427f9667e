"""Locks a killed process held: the queue mutex is released by the watch only once its owner is gone, and a policy
store whose lock will never come back lets its waiters go when the run stops."""

import multiprocessing as mp
import os
import signal
import threading

import faster_fifo
import faster_fifo_reduction  # noqa: F401
import pytest
import torch
from torch import nn

from sf.runtime.abandoned_locks import LockWatch, lock_mutex, mutex_address, release_abandoned, supported
from sf.runtime.policy_store import LOCK_POLL_S, SharedPolicyStore

pytestmark = pytest.mark.skipif(not supported(), reason="queue mutex layout not recognised on this platform")


def _hold_queue_lock(queue, held, _release):
    lock_mutex(mutex_address(queue))
    held.set()
    threading.Event().wait()


def _hold_store_lock(store, held, _release):
    store.lock.acquire()
    held.set()
    threading.Event().wait()


def _holder(target, obj):
    """A spawned process that takes `obj`'s lock and waits; returns it once the lock is held."""
    ctx = mp.get_context("spawn")
    held = ctx.Event()
    proc = ctx.Process(target=target, args=(obj, held, None), daemon=True)
    proc.start()
    assert held.wait(60)
    return proc


def _kill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()


def _in_thread(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_a_live_holders_lock_stays_a_dead_holders_lock_is_released():
    queue = faster_fifo.Queue(10_000)
    queue.put(7)
    proc = _holder(_hold_queue_lock, queue)
    got = []
    reader = _in_thread(lambda: got.append(queue.get_many(block=True, timeout=0.05)))
    try:
        assert release_abandoned({"q": queue}) == []  # the holder lives: its lock is its own
        reader.join(0.5)
        assert reader.is_alive()  # still waiting for the mutex
    finally:
        _kill(proc)
    assert release_abandoned({"q": queue, "same queue": queue}) == ["q"]
    reader.join(10)
    assert not reader.is_alive() and got == [[7]]
    assert release_abandoned({"q": queue}) == []  # free now


def test_the_watch_frees_a_thread_blocked_on_a_dead_holders_lock():
    queue = faster_fifo.Queue(10_000)
    proc = _holder(_hold_queue_lock, queue)
    writer = _in_thread(lambda: queue.put("after the death", timeout=1.0))
    watch = LockWatch({"runner": queue}, period_s=0.02).start()
    try:
        _kill(proc)
        writer.join(10)
    finally:
        watch.stop()
    assert not writer.is_alive() and watch.released == ["runner"]
    assert queue.get_many(block=False) == ["after the death"]


def test_a_store_whose_lock_died_with_its_holder_lets_the_learner_go_once_the_run_stops():
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    store = SharedPolicyStore(nn.Linear(3, 2), ctx.Lock(), stop)
    proc = _holder(_hold_store_lock, store)
    _kill(proc)
    newer = nn.Linear(3, 2)
    publisher = _in_thread(lambda: store.publish(newer, 5))
    publisher.join(3 * LOCK_POLL_S)
    assert publisher.is_alive()  # the run goes on: the lock is waited for
    stop.set()
    publisher.join(10)
    assert not publisher.is_alive()
    assert store.version == 0  # given up, nothing half-written
    model = nn.Linear(3, 2)
    before = model.weight.clone()
    store.version_t[0] = 1
    assert store.maybe_load(model, 0) == 0  # an inference worker keeps the weights it has
    assert torch.equal(model.weight, before)
