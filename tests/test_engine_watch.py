"""The engine watch of a rollout worker: a dead engine is reported only while the loop has stopped beating since."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from sf.supervision.engine_watch import STUCK_S, EngineWatch


def _engine_watch(now: float) -> tuple[EngineWatch, SimpleNamespace, subprocess.Popen]:
    heartbeat = SimpleNamespace(last_beat=now, loop_running=True)
    engine = subprocess.Popen(["sleep", "60"])
    watch = EngineWatch(heartbeat, report=lambda message: None)
    assert watch.check(now) is None and engine.pid in watch.engines  # the loop beats: the engine comes into view
    return watch, heartbeat, engine


def test_a_dead_engine_with_a_stopped_loop_is_reported_after_the_stuck_time():
    watch, _, engine = _engine_watch(100.0)
    engine.kill()
    engine.wait()
    assert watch.check(100.5) is None  # seen dead, not yet stuck for long
    message = watch.check(100.5 + STUCK_S)
    assert message is not None and f"env engine sleep (pid {engine.pid}) died" in message


def test_a_dead_engine_while_the_loop_beats_on_is_not_an_error():
    watch, heartbeat, engine = _engine_watch(100.0)
    engine.kill()
    engine.wait()
    assert watch.check(100.5) is None
    heartbeat.last_beat = 101.0  # the loop beat after the death: the worker was not waiting on that engine
    assert watch.check(100.5 + 2 * STUCK_S) is None
    heartbeat.last_beat = 200.0
    assert watch.check(200.1) is None and engine.pid not in watch.engines  # let go at the next look for engines
