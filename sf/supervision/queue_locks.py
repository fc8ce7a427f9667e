"""A run's queue that a dead process left locked, and how a restart takes it back.

faster-fifo guards each queue with a process-shared pthread mutex that is not robust: a process killed inside a put
or a get leaves it locked, and every later put or get waits forever (`sf.runner.mailbox`). A run that restarts a
dead component (one in 20-30 kills of a busy rollout worker lands inside a put) must take such a lock back first.
glibc records in the mutex the thread that holds it (`__lock` and `__owner`, the first and third 32-bit words of
`pthread_mutex_t` on Linux), and faster-fifo keeps the mutex at a fixed place of the queue's shared header, after
the ring's counters (`head`, `tail`, `size`, `num_elem`); `holder` reads both.

What the dead thread was doing under the lock is known from faster-fifo's code: a get pops message by message,
moving `head` only after each copy, so the ring is whole whatever the moment; a put appends a message's 8-byte
length, then its bytes, advancing `tail` and `size` after each, so the ring may end in a length whose bytes never
came. `repair` finishes the critical section in the dead thread's place: it walks the ring from `head`, cuts that
last partial message off, recounts the messages, releases the mutex and wakes whoever waits for it. Where the header
does not look as expected (another faster-fifo, a libc that lays the mutex out otherwise) nothing is touched, and
the restart is refused instead (`dead_holders` names the queue).

A process killed while it waited on a queue leaves its condition variables unusable for the next waiter (glibc keeps
a reference for each sleeper, which nobody drops); a restart therefore gives the replacement a fresh queue. Once no
process uses the old one any more, `renew` initializes its mutex, conditions and ring again, so that the spares never
run out in a run of days.
"""

from __future__ import annotations

import ctypes
import platform

import numpy as np

MUTEX_OFFSET = 56  # of the mutex in faster-fifo's queue header: after six size_t counters and the mutex attributes
HEAD, TAIL, SIZE, COUNT = 2, 3, 4, 5  # the ring's counters, 64-bit words of the header
MUTEX_ATTR, COND_ATTR, WAITERS, CONDITIONS = 48, 96, 100, (112, 160)  # the rest of the header, byte offsets
_PSHARED_KIND = 128  # PTHREAD_MUTEX_PSHARED_BIT in `__kind`, the fifth word of the mutex
_LOCK, _OWNER, _USERS = MUTEX_OFFSET // 4, MUTEX_OFFSET // 4 + 2, MUTEX_OFFSET // 4 + 3  # 32-bit words
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAKE = 1


def _words(queue) -> np.ndarray:
    return np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)


def layout_known(queue) -> bool:
    """The header holds a process-shared mutex where this module reads it (and the futex call is known here)."""
    words = _words(queue)
    return (
        _SYS_FUTEX is not None
        and len(words) * 4 >= MUTEX_OFFSET + 20
        and words[(MUTEX_OFFSET + 16) // 4] & _PSHARED_KIND != 0
    )


def holder(queue) -> int | None:
    """The thread id that holds the queue's lock, or None when it is free."""
    words = _words(queue)
    if words[MUTEX_OFFSET // 4] == 0:
        return None
    return int(words[(MUTEX_OFFSET + 8) // 4])


def dead_holders(queues: dict[str, object]) -> list[str] | str:
    """The names of the queues whose lock a thread that no longer exists holds; a string (why) when one cannot be
    read."""
    found = []
    for name, queue in queues.items():
        if not layout_known(queue):
            return f"the lock of the queue {name} cannot be read"
        tid = holder(queue)
        if tid is not None and not _alive(tid):
            found.append(name)
    return found


def _alive(tid: int) -> bool:
    """The thread exists and is not a zombie (a killed process stays one until its parent reaps it)."""
    try:
        text = open(f"/proc/{tid}/stat").read()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


def repair(queue) -> int:
    """Take back the lock of `queue` from a dead thread: cut a message it left half-written off the ring, recount,
    release, wake the waiters. Only while the holder is dead (nobody else is inside). Returns the bytes cut off."""
    header = np.frombuffer(queue.queue_obj_buffer, dtype=np.int64)
    ring = np.frombuffer(queue.shared_memory, dtype=np.uint8)
    capacity, at, left = int(header[0]), int(header[HEAD]), int(header[SIZE])
    count = 0
    while left >= 8:
        length = int(np.frombuffer(np.take(ring, np.arange(at, at + 8) % capacity).tobytes(), dtype="<u8")[0])
        if 8 + length > left:
            break
        at, left, count = (at + 8 + length) % capacity, left - 8 - length, count + 1
    header[TAIL] = (int(header[TAIL]) - left) % capacity
    header[SIZE] -= left
    header[COUNT] = count
    words = np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)
    words[_OWNER] = 0
    words[_USERS] = max(0, int(words[_USERS]) - 1)
    words[_LOCK] = 0
    lock = ctypes.addressof(ctypes.c_int32.from_buffer(queue.queue_obj_buffer, MUTEX_OFFSET))
    ctypes.CDLL(None, use_errno=True).syscall(_SYS_FUTEX, ctypes.c_void_p(lock), _FUTEX_WAKE, 2**31 - 1, None, None, 0)
    return left


def idle(queue) -> bool:
    """No process is inside a put or a get of `queue`, nor waits for room in it (once none routes to it)."""
    words = _words(queue)
    return holder(queue) is None and words[WAITERS // 4 + 1] == 0


def renew(queue) -> None:
    """Make a queue no process uses any more as good as new: empty ring, fresh mutex and conditions (with the
    process-shared attributes faster-fifo made them with)."""
    header = np.frombuffer(queue.queue_obj_buffer, dtype=np.int64)
    header[[HEAD, TAIL, SIZE, COUNT]] = 0
    words = _words(queue)
    words[WAITERS // 4 : WAITERS // 4 + 2] = 0
    base = ctypes.addressof(queue.queue_obj_buffer)
    libc = ctypes.CDLL(None)
    libc.pthread_mutex_init(ctypes.c_void_p(base + MUTEX_OFFSET), ctypes.c_void_p(base + MUTEX_ATTR))
    for offset in CONDITIONS:
        libc.pthread_cond_init(ctypes.c_void_p(base + offset), ctypes.c_void_p(base + COND_ATTR))
