"""The serial run's watchdog: the run answers Ctrl-C and SIGTERM, and ends, whatever its one thread is stuck in.

A serial run does everything in one thread, so a call that never returns (an env whose engine died under it, a
simulator in an endless loop) would leave it deaf: SIGINT and SIGTERM stay blocked in that thread (the engines it
starts inherit the block, so a signal to the process group cannot end one before its env is closed) and are only
looked at between steps. This thread takes them instead: pending ones with `sigtimedwait`, and those the kernel gave
a thread that does not block them (one started before the block) through the wakeup descriptor Python's handler
writes to. A stop request sets the stop flag, and the loop stops at its next step. What it watches for:

- a stop that does not finish: after a stop request, or once the loop has returned, the run has `--stop_timeout_sec`
  to finish its step, save and close its envs;
- a loop that stops beating: no beat for `--heartbeat_timeout_sec` (`START_LIMIT_S` at least before the first one,
  while the envs start) is a hang, named with the component and the Timing scope it is inside and the env.

Either way it gives up on the stuck thread: `give_up(status, cause)` saves what can be saved and writes the run's
outputs from this thread, and the process exits with the status's code; the stuck call never returns.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable

from sf.supervision.process_start import STOP_SIGNALS
from sf.supervision.supervisor import START_LIMIT_S
from sf.utils.roles import RUNNER

log = logging.getLogger("sf")

POLL_S = 0.1


class SerialWatch:
    def __init__(self, cfg, loop, stop_event, give_up: Callable[[str, str], None]):
        """`give_up(status, cause)`: status "interrupted" (a stop that did not finish) or "error" (a hang)."""
        self.cfg = cfg
        self.loop = loop
        self.stop_event = stop_event
        self.give_up = give_up
        self.last_beat = time.monotonic()
        self.beaten = False
        self.stop_asked: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sf-serial-watch", daemon=True)
        self._wake, wake_end = socket.socketpair()
        self._wake.setblocking(False)
        wake_end.setblocking(False)
        self._wake_end = wake_end
        self._previous_wakeup = signal.set_wakeup_fd(wake_end.fileno(), warn_on_full_buffer=False)

    def start(self) -> SerialWatch:
        """From the main thread, once it blocks the stop signals (the thread inherits the block)."""
        self._thread.start()
        return self

    def beat(self) -> None:
        """From the loop (a timer): it is not stuck."""
        self.last_beat = time.monotonic()
        self.beaten = True

    def loop_returned(self) -> None:
        """The loop is over: from now the run is stopping, and has the stop timeout to finish."""
        if self.stop_asked is None:
            self.stop_asked = time.monotonic()

    def done(self) -> None:
        """From the main thread, everything saved and closed: the thread ends."""
        self._done.set()
        self._thread.join(timeout=1.0)
        signal.set_wakeup_fd(self._previous_wakeup)
        self._wake.close()
        self._wake_end.close()

    def _run(self) -> None:
        while not self._done.is_set():
            caught = signal.sigtimedwait(STOP_SIGNALS, POLL_S) is not None or self._woken()
            now = time.monotonic()
            if (caught or self.stop_event.is_set()) and self.stop_asked is None:
                self.stop_asked = now
                self.stop_event.set()
            if self._done.is_set():
                return
            cause = self._stuck(now)
            if cause is not None:
                self._done.set()
                self.give_up(*cause)
                return

    def _woken(self) -> bool:
        """A stop signal reached a thread that does not block it: its number came through the wakeup descriptor."""
        try:
            data = self._wake.recv(64)
        except BlockingIOError:
            return False
        return any(number in STOP_SIGNALS for number in data)

    def _stuck(self, now: float) -> tuple[str, str] | None:
        cfg = self.cfg
        if self.stop_asked is not None:
            if now - self.stop_asked > cfg.stop_timeout_sec:
                return "interrupted", f"{self.where()} did not return within --stop_timeout_sec={cfg.stop_timeout_sec}"
            return None
        limit = cfg.heartbeat_timeout_sec if self.beaten else max(cfg.heartbeat_timeout_sec, START_LIMIT_S)
        if now - self.last_beat > limit:
            flag = "--heartbeat_timeout_sec" if self.beaten else "the start limit"
            return "error", f"{self.where()} for {now - self.last_beat:.0f} s ({flag}={limit:g}): stopped or hung"
        return None

    def where(self) -> str:
        """The component and scope the loop is inside, with the env: where the run is stuck."""
        inside = [
            (component.name, scope)
            for component in self.loop.components.values()
            if component.name != RUNNER and (scope := component.timing.open_scope()) is not None
        ]
        if not inside:
            return f"the serial loop (env {self.cfg.env})"
        name, (path, _) = max(inside, key=lambda item: item[1][1])
        return f"{name}, inside {path} (env {self.cfg.env}),"
