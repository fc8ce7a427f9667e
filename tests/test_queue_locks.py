"""A queue whose lock a killed process held is taken back whole: waiters go on, a message half-written is cut off,
every complete one is still read, in order."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import threading

import faster_fifo
import numpy as np

from sf.supervision.queue_locks import COUNT, HEAD, MUTEX_OFFSET, SIZE, TAIL, dead_holders, holder, layout_known, repair


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
    assert holder(queue) == dead and dead_holders({"q": queue, "free": faster_fifo.Queue(100)}) == ["q"]
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
    _die_holding(queue, half_written=40)
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
