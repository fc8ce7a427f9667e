"""What the tests need to know of faster-fifo's queue object: where its process-shared mutex lives, to take it (a
process that dies holding it) or to read whether it is held (a writer killed inside a put). sf itself never touches
the mutex of a queue."""

from __future__ import annotations

import ctypes
from functools import cache

import faster_fifo

# faster-fifo's `struct Queue`: six size_t fields (max_size_bytes, maxsize, head, tail, size, num_elem), a
# pthread_mutexattr_t (4 bytes, padded to 8), then the mutex, whose first int is glibc's lock word
MUTEX_OFFSET = 6 * 8 + 8


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mutex_address(queue: faster_fifo.Queue) -> int:
    return ctypes.addressof(queue.queue_obj_buffer) + MUTEX_OFFSET


def lock_queue(queue: faster_fifo.Queue) -> bool:
    """Take the queue's mutex (pthread_mutex_lock) and keep it."""
    return _libc().pthread_mutex_lock(ctypes.c_void_p(mutex_address(queue))) == 0


def queue_locked(queue: faster_fifo.Queue) -> bool:
    """Whether someone holds the queue's mutex (its lock word is set); reading it changes nothing."""
    return ctypes.c_int.from_address(mutex_address(queue)).value != 0


def layout_recognised() -> bool:
    """The mutex is where this module expects: free, it reads unlocked; taken by this thread, locked."""
    queue = faster_fifo.Queue(1024)
    if queue_locked(queue) or not lock_queue(queue):
        return False
    held = queue_locked(queue)
    _libc().pthread_mutex_unlock(ctypes.c_void_p(mutex_address(queue)))
    return held and not queue_locked(queue)
