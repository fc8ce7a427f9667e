"""A queue whose lock a killed process held is taken back whole: waiters go on, a message half-written is cut off,
every complete one is still read, in order. A lock a live thread may hold is never taken: busy queues scanned and
"repaired" beside their producers and consumers lose no message."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import threading
import time

import faster_fifo
import numpy as np
import pytest

from sf.supervision.queue_locks import (
    CONDITIONS,
    COUNT,
    HEAD,
    MUTEX_OFFSET,
    SIZE,
    TAIL,
    _alive,
    dead_holder,
    dead_holders,
    holder,
    layout_known,
    repair,
    wake_sleepers,
)


def _die_holding(queue, half_written: int | None = None) -> int:
    """A process takes the queue's lock (as a put does) and is killed holding it; with `half_written`, it first
    appends the 8-byte length of a message of that many bytes and none of its bytes (as a put killed between the
    two)."""

    def hold(ready) -> None:
        libc = ctypes.CDLL(None)
        libc.pthread_mutex_lock(ctypes.c_void_p(ctypes.addressof(queue.queue_obj_buffer) + MUTEX_OFFSET))
        if half_written is not None:
            header = np.frombuffer(queue.queue_obj_buffer, dtype=np.int64)
            ring = np.frombuffer(queue.shared_memory, dtype=np.uint8)
            at = int(header[TAIL])
            ring[(np.arange(8) + at) % len(ring)] = np.frombuffer(np.uint64(half_written).tobytes(), dtype=np.uint8)
            header[TAIL] = (at + 8) % len(ring)
            header[SIZE] += 8
        ready.set()
        threading.Event().wait()

    ctx = mp.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=hold, args=(ready,))
    proc.start()
    assert ready.wait(10)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    return proc.pid


def test_the_layout_is_the_one_read_and_a_free_lock_has_no_holder():
    queue = faster_fifo.Queue(1000)
    assert layout_known(queue) and holder(queue) is None
    queue.put("x")
    header = np.frombuffer(queue.queue_obj_buffer, dtype=np.int64)
    assert header[COUNT] == 1 and header[SIZE] == header[TAIL] - header[HEAD] > 8


def test_a_lock_a_killed_process_held_is_named_and_taken_back_and_its_waiters_go_on():
    queue = faster_fifo.Queue(10_000)
    queue.put_many(["a", "b"])
    dead = _die_holding(queue)
    free = faster_fifo.Queue(100)
    assert holder(queue) == dead and dead_holders({"q": queue, "free": free}, {dead}) == {"q": dead}
    assert dead_holders({"q": queue}, {dead + 1}) == {}  # a thread not known to have ended is no proof
    got = []
    waiter = threading.Thread(target=lambda: got.extend(queue.get_many(timeout=5)), daemon=True)
    waiter.start()  # blocks on the lock, not on the condition
    waiter.join(0.3)
    assert waiter.is_alive()
    assert repair(queue) == 0
    waiter.join(5)
    assert got == ["a", "b"] and holder(queue) is None
    queue.put("c")
    assert queue.get(timeout=1) == "c"


def test_a_message_half_written_by_a_killed_put_is_cut_off_and_the_ring_stays_whole():
    queue = faster_fifo.Queue(300)  # small: the ring wraps
    for i in range(12):
        queue.put(f"m{i}")
        if i % 3 == 2:
            queue.get(timeout=1)
    before = queue.qsize()
    dead = _die_holding(queue, half_written=40)
    assert dead_holder(queue, {dead}) == dead
    assert repair(queue) == 8
    assert queue.qsize() == before
    assert [queue.get(timeout=1) for _ in range(before)] == [f"m{i}" for i in range(12) if i not in (0, 1, 2, 3)]
    queue.put_many([f"n{i}" for i in range(5)])
    assert queue.get_many(timeout=1) == [f"n{i}" for i in range(5)]


def _waiter(queue) -> None:
    while True:
        try:
            queue.get_many(timeout=100)
        except faster_fifo.Empty:
            pass


def test_a_queue_a_killed_waiter_left_is_renewed_and_serves_a_new_reader():
    """Without `renew`, a new reader after a killed waiter makes puts hang for good (glibc's condition variable
    keeps the dead sleeper's reference)."""
    from sf.supervision.queue_locks import idle, renew

    ctx = mp.get_context("fork")
    queue = faster_fifo.Queue(100_000)
    waiter = ctx.Process(target=_waiter, args=(queue,), daemon=True)
    waiter.start()
    while np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)[25] == 0:  # its wait counted (not_empty waiters)
        pass
    os.kill(waiter.pid, signal.SIGKILL)
    waiter.join()
    assert idle(queue)
    renew(queue)
    got = ctx.Queue()
    reader = ctx.Process(target=lambda: got.put(sum(len(queue.get_many(timeout=5)) for _ in range(20))), daemon=True)
    reader.start()
    done = threading.Event()

    def put() -> None:
        for i in range(2000):
            queue.put(i, timeout=1.0)
        done.set()

    threading.Thread(target=put, daemon=True).start()
    assert done.wait(20), "a put hangs"
    reader.join(20)
    assert not reader.is_alive()


def test_a_holder_killed_inside_a_signal_leaves_the_condition_locked_and_the_repair_frees_it():
    """A put signals `not_empty` under the mutex; killed inside that signal, it leaves the condition's internal lock
    taken, and a reader whose wait times out then waits for that lock forever, unless the repair frees it."""
    queue = faster_fifo.Queue(10_000)
    outcome = []

    def read() -> None:
        try:
            outcome.append(queue.get_many(timeout=0.3))
        except faster_fifo.Empty:
            outcome.append("empty")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()  # waits on `not_empty` (the mutex is free while it waits)
    words = np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)
    while words[25] == 0:  # its wait counted (not_empty waiters)
        time.sleep(0.001)
    not_empty_lock = (CONDITIONS[0] + 32) // 4

    def die_inside_signal(ready) -> None:
        libc = ctypes.CDLL(None)
        libc.pthread_mutex_lock(ctypes.c_void_p(ctypes.addressof(queue.queue_obj_buffer) + MUTEX_OFFSET))
        np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)[not_empty_lock] |= 1  # as pthread_cond_signal takes it
        ready.set()
        threading.Event().wait()

    ctx = mp.get_context("fork")
    ready = ctx.Event()
    holder_proc = ctx.Process(target=die_inside_signal, args=(ready,))
    holder_proc.start()
    assert ready.wait(10)
    os.kill(holder_proc.pid, signal.SIGKILL)
    holder_proc.join()
    reader.join(1.0)
    assert reader.is_alive()  # its wait timed out: it waits for the condition's lock the dead put kept
    assert dead_holder(queue, {holder_proc.pid}) == holder_proc.pid
    repair(queue)
    reader.join(5)
    assert outcome == ["empty"] and words[not_empty_lock] & 3 == 0
    queue.put("after")
    assert queue.get(timeout=1) == "after"


def test_a_waiter_a_killed_unlock_never_woke_is_woken_and_takes_the_free_lock():
    """glibc's unlock releases the lock word, then wakes a sleeper: a process killed between the two leaves the
    sleeper asleep over a free lock, until `wake_sleepers`."""
    queue = faster_fifo.Queue(10_000)
    queue.put("x")
    words = np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)

    def release_without_waking(ready, release) -> None:
        libc = ctypes.CDLL(None)
        libc.pthread_mutex_lock(ctypes.c_void_p(ctypes.addressof(queue.queue_obj_buffer) + MUTEX_OFFSET))
        ready.set()
        release.wait()
        shared = np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)
        shared[16], shared[17] = 0, shared[17] - 1  # owner and users, as the unlock clears them
        shared[14] = 0  # the lock word released; killed before the wake
        threading.Event().wait()

    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    unlocker = ctx.Process(target=release_without_waking, args=(ready, release))
    unlocker.start()
    assert ready.wait(10)
    got = []
    reader = threading.Thread(target=lambda: got.extend(queue.get_many(timeout=1)), daemon=True)
    reader.start()
    while words[14] != 2:  # the reader sleeps on the lock word
        time.sleep(0.001)
    release.set()
    while words[14] != 0:
        time.sleep(0.001)
    os.kill(unlocker.pid, signal.SIGKILL)
    unlocker.join()
    reader.join(1.0)
    assert reader.is_alive()  # asleep over a free lock
    wake_sleepers(queue)
    reader.join(5)
    assert got == ["x"]


def test_a_lock_a_live_thread_holds_is_never_proven_dead_even_under_an_id_the_run_saw_end():
    """A live holder named by an id in the set of ended threads (as a reused id would be) stays untouched."""
    queue = faster_fifo.Queue(1000)
    libc = ctypes.CDLL(None)
    mutex = ctypes.c_void_p(ctypes.addressof(queue.queue_obj_buffer) + MUTEX_OFFSET)
    assert libc.pthread_mutex_lock(mutex) == 0
    try:
        me = threading.get_native_id()
        assert holder(queue) == me and dead_holder(queue, {me, 0}) is None
    finally:
        libc.pthread_mutex_unlock(mutex)


PAYLOAD = b"p" * 200
BATCH = 16


def _produce(queue, stop, sent) -> None:
    seq = 0
    while not stop.is_set():
        try:
            queue.put_many([(seq + i, PAYLOAD) for i in range(BATCH)], timeout=0.05)
            seq += BATCH
        except faster_fifo.Full:
            pass
    sent.value = seq


def _consume(queue, stop, received, errors) -> None:
    expected = 0
    while True:
        try:
            msgs = queue.get_many(timeout=0.05)
        except faster_fifo.Empty:
            if stop.is_set():
                break
            continue
        except Exception:  # a message that does not unpickle: a corrupted ring
            errors.value += 1
            continue
        for msg in msgs:
            if not (isinstance(msg, tuple) and msg[0] == expected and msg[1] == PAYLOAD):
                errors.value += 1
            expected = (msg[0] if isinstance(msg, tuple) else expected) + 1
    received.value = expected


def _stress(seconds: float) -> None:
    """Two busy queues, each with a producer and a consumer process, while this process scans every lock and repairs
    whatever it finds proven dead, naming the live processes' own thread ids (and 0) as ended: the worst a reused
    id could do. The unguarded check (lock word set, owner word not a live thread) runs beside it for comparison."""
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    queues = {f"q{i}": faster_fifo.Queue(200_000) for i in range(2)}
    sent = [ctx.Value("q", 0) for _ in queues]
    received = [ctx.Value("q", 0) for _ in queues]
    errors = [ctx.Value("q", 0) for _ in queues]
    procs = []
    for i, queue in enumerate(queues.values()):
        procs.append(ctx.Process(target=_produce, args=(queue, stop, sent[i]), daemon=True))
        procs.append(ctx.Process(target=_consume, args=(queue, stop, received[i], errors[i]), daemon=True))
    for proc in procs:
        proc.start()
    try:
        ended = {0} | {proc.pid for proc in procs}
        repairs = scans = unguarded = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = dead_holders(queues, ended)
            assert isinstance(found, dict), found
            for name in found:
                repair(queues[name])
                repairs += 1
            for queue in queues.values():
                tid = holder(queue)
                unguarded += tid is not None and not _alive(tid)
            scans += 1
        stop.set()
        for proc in procs:
            proc.join(10)
            assert proc.exitcode == 0, proc
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    print(f"{scans} scans, {unguarded} unguarded reads of a live lock as dead-held, {repairs} repairs")
    assert repairs == 0
    assert [e.value for e in errors] == [0, 0]
    assert [r.value for r in received] == [s.value for s in sent] and min(s.value for s in sent) > 1000


def test_busy_queues_scanned_beside_their_producers_and_consumers_lose_no_message():
    _stress(4.0)


@pytest.mark.slow
def test_busy_queues_scanned_for_a_minute_lose_no_message():
    _stress(60.0)
