"""A rollout worker stuck on a dead env engine. VizDoom runs each game in a process of its own; a call into a game
whose engine was killed usually raises at once, but a call made just as the engine dies can wait forever, with the
GIL released. The worker's loop then stops beating, and the run would end only after `--heartbeat_timeout_sec`,
naming the worker as hung. This thread sees it within seconds and says why: once the loop runs, it keeps the worker's
child processes (the engines) in view, and when one has died and the loop has not beaten for `STUCK_S` since, it
reports that engine and ends the process. A child that ends while the loop goes on beating is left alone, and so are
the engines the worker closes once its loop has returned (`disarm`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from sf.supervision.orphans import child_pids, describe, running, start_time
from sf.supervision.shared_flags import Heartbeat

PERIOD_S = 0.5  # each look reads one /proc file per engine: 16 engines cost 2 ms a second
REFRESH_S = 5.0  # how often new engines are looked for: a scan of every process in /proc, 5-20 ms
STUCK_S = 2.0


class EngineWatch:
    def __init__(self, heartbeat: Heartbeat, report: Callable[[str], None]):
        self.heartbeat = heartbeat
        self.report = report
        self.engines: dict[int, tuple[int | None, str]] = {}  # pid -> (start time, description)
        self.dead: dict[int, float] = {}  # pid -> when it was first seen dead
        self.refreshed = -REFRESH_S
        self.disarmed = threading.Event()

    def start(self) -> EngineWatch:
        threading.Thread(target=self._run, name="sf-engine-watch", daemon=True).start()
        return self

    def disarm(self) -> None:
        """The loop has returned: from here the worker closes its envs, and their engines end as they should."""
        self.disarmed.set()

    def _run(self) -> None:
        while not self.disarmed.wait(PERIOD_S):
            if self.heartbeat.loop_running:
                stuck = self.check(time.monotonic())
                if stuck and not self.disarmed.is_set():
                    self.report(stuck)
                    os._exit(1)

    def check(self, now: float) -> str | None:
        """The message for an engine this worker is stuck on, or None."""
        beat = self.heartbeat.last_beat
        if now - beat < STUCK_S and now - self.refreshed >= REFRESH_S:
            # the loop beats: engines started since come into view, and those that ended meanwhile are let go
            self.refreshed = now
            for pid in child_pids(os.getpid()) - self.engines.keys():
                self.engines[pid] = (start_time(pid), describe(pid))
            for pid in [pid for pid, died in self.dead.items() if beat > died]:
                del self.engines[pid], self.dead[pid]
        for pid, (started, _) in self.engines.items():
            if pid not in self.dead and not running(pid, started):
                self.dead[pid] = now
        for pid, died in self.dead.items():
            if beat < died and now - died >= STUCK_S:
                return (
                    f"env engine {self.engines[pid][1]} died, and the worker has been stuck for {now - died:.1f} s "
                    "since, inside a call that does not return"
                )
        return None
