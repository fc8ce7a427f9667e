"""What every process of a run shares without a lock: the stop flag and one heartbeat counter per process.

A multiprocessing Event is a semaphore-guarded flag: a process killed while it reads the flag leaves the semaphore
taken, and every later reader, the main process included, waits for it forever. Here the flag and the counters are
plain 64-bit words in one shared block (aligned stores and loads are atomic), so a death at any instant leaves
them readable. Each counter has a single writer, the process it belongs to; the supervisor only reads them.
"""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np

WAIT_POLL_S = 0.05


class RunControl:
    """The stop flag (`set`, `is_set`, `wait`: an Event's interface) and `num_slots` heartbeat counters."""

    def __init__(self, ctx, num_slots: int):
        self._raw = ctx.RawArray(ctypes.c_int64, 1 + num_slots)
        self._attach()

    def _attach(self) -> None:
        self._words = np.frombuffer(self._raw, dtype=np.int64)

    def __getstate__(self) -> dict:
        return {"_raw": self._raw}

    def __setstate__(self, state: dict) -> None:
        self._raw = state["_raw"]
        self._attach()

    @property
    def num_slots(self) -> int:
        return len(self._words) - 1

    def set(self) -> None:
        self._words[0] = 1

    def is_set(self) -> bool:
        return bool(self._words[0])

    def wait(self, timeout: float | None = None) -> bool:
        """Until the flag is set or `timeout` seconds passed; whether it is set."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = WAIT_POLL_S if deadline is None else min(WAIT_POLL_S, deadline - time.monotonic())
            if left <= 0:
                return False
            time.sleep(left)
        return True

    def beat(self, slot: int) -> None:
        self._words[1 + slot] += 1

    def beats(self) -> np.ndarray:
        """A copy of every counter, slot order."""
        return self._words[1:].copy()


class Heartbeat:
    """One process's beats into its counter: from a thread while the process starts (imports, env creation, JIT
    compiles: single calls of seconds that are not a hang), from its loop (`beat`, every period) once that runs. The
    thread gives up after `start_limit_s`: a start that never ends is a hang too. SIGSTOP stops both."""

    def __init__(self, control: RunControl, slot: int, period_s: float, start_limit_s: float):
        self.control = control
        self.slot = slot
        self._running = threading.Event()
        self.last_beat = time.monotonic()  # of the loop's last beat (the start thread's beats do not count)
        control.beat(slot)
        threading.Thread(
            target=self._starting, args=(period_s, time.monotonic() + start_limit_s), name="sf-start-beat", daemon=True
        ).start()

    def _starting(self, period_s: float, deadline: float) -> None:
        while not self._running.wait(period_s) and time.monotonic() < deadline:
            self.control.beat(self.slot)

    @property
    def loop_running(self) -> bool:
        return self._running.is_set()

    def beat(self) -> None:
        self._running.set()
        self.last_beat = time.monotonic()
        self.control.beat(self.slot)
