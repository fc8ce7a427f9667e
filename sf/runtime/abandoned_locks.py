"""Queue locks that a killed process left held.

faster-fifo guards each queue with a process-shared pthread mutex, not a robust one: a component killed (SIGKILL,
the OOM killer) inside a put or a get leaves that mutex locked, and every later put or get on the queue waits for
it forever. When the queue is the runner's inbox, the main process itself stops: it can neither notice the death
nor stop the others.

glibc records the id of the thread that owns a mutex inside the mutex. `LockWatch` is a thread of the process that
created the queues (the runner, a node agent); a few times a second it reads each queue's mutex and unlocks one
whose owner thread no longer exists. The queue's contents are consistent at any point a holder can die: a put
makes its message visible only after copying all of it, a get removes messages only after reading them.

The mutex's place inside faster-fifo's queue object and glibc's field order are checked once on a live mutex
(`supported()`); where the check fails (another C library, another faster-fifo layout) the watch does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from functools import cache
from pathlib import Path

import faster_fifo

log = logging.getLogger("sf")

# faster-fifo's `struct Queue`: six size_t fields, a pthread_mutexattr_t (4 bytes, padded to 8), then the mutex
MUTEX_OFFSET = 6 * 8 + 8
# glibc's `struct __pthread_mutex_s` begins: int __lock; unsigned int __count; int __owner (a thread id)
LOCK_WORD, OWNER_WORD = 0, 8
WATCH_S = 0.1


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mutex_address(queue: faster_fifo.Queue) -> int:
    return ctypes.addressof(queue.queue_obj_buffer) + MUTEX_OFFSET


def lock_mutex(address: int) -> int:
    """pthread_mutex_lock on the mutex at `address`; 0 on success."""
    return _libc().pthread_mutex_lock(ctypes.c_void_p(address))


def unlock_mutex(address: int) -> int:
    return _libc().pthread_mutex_unlock(ctypes.c_void_p(address))


def _state(address: int) -> tuple[int, int]:
    """(lock word, owner thread id) of the mutex at `address`."""
    return ctypes.c_int.from_address(address + LOCK_WORD).value, ctypes.c_int.from_address(address + OWNER_WORD).value


@cache
def supported() -> bool:
    """Whether a queue's mutex is where and what this module expects: locked by this thread, it must read as
    locked and owned by this thread's id; unlocked, as free and unowned."""
    try:
        queue = faster_fifo.Queue(1024)
        address = mutex_address(queue)
        if lock_mutex(address) != 0:
            return False
        held = _state(address)
        unlock_mutex(address)
        return held[0] != 0 and held[1] == threading.get_native_id() and _state(address) == (0, 0)
    except (OSError, AttributeError, TypeError):
        return False


def thread_alive(tid: int) -> bool:
    """The thread exists and has not exited (a zombie process's main thread reads 'Z')."""
    try:
        stat = Path(f"/proc/{tid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZXx"


def release_abandoned(queues: dict[str, faster_fifo.Queue]) -> list[str]:
    """Unlock every queue mutex whose owner thread is gone; return the names of those queues.

    An owner that is gone can no longer unlock, and nobody else can have taken the mutex since, so what is read
    here stays true until this call unlocks it (a lock word set with no owner yet is a live thread between the
    two stores of its lock: left alone)."""
    if not supported():
        return []
    released, seen = [], set()
    for name, queue in list(queues.items()):
        address = mutex_address(queue)
        if address in seen:  # one queue under several names (a batcher's address is its learner's inbox)
            continue
        seen.add(address)
        lock, owner = _state(address)
        if lock != 0 and owner > 0 and not thread_alive(owner):
            unlock_mutex(address)
            log.warning("the queue of %s was left locked by thread %d, which died: unlocked", name, owner)
            released.append(name)
    return released


class LockWatch:
    """A daemon thread releasing abandoned queue locks every `period_s`, from `start()` until `stop()`. It runs
    beside the owner's main thread, which may itself be the one waiting for such a lock."""

    def __init__(self, queues: dict[str, faster_fifo.Queue], period_s: float = WATCH_S):
        self.queues = queues
        self.period_s = period_s
        self.released: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sf-lock-watch", daemon=True)

    def start(self) -> LockWatch:
        if supported():
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.released += release_abandoned(self.queues)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
