"""`sf.profile top` on a real run while a bottleneck is switched on and off: the simulator of
`induced_bottlenecks --watch` sleeps 2 ms a step only while a file exists, and the verdict on screen must follow
within a few one-second refreshes, as a user watching it would see."""

import os
import subprocess
import sys
import time

import pytest

from sf.analysis.recent import LIVE_WINDOW_S
from sf.analysis.top import LiveSource, frame_text
from sf_examples.profiling.induced_bottlenecks import SWITCHABLE
from sf_examples.profiling.sleepy_env import SWITCH_FILE
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

REFRESH_S = 1.0
FEW = 6  # refreshes: the verdict covers the last 4 s, snapshots arrive every 2 s, envs look at the switch twice a s


def settles(source: LiveSource, wanted, limit: int, hold: int = 3, after_s: float = 0.0) -> tuple[int, list[str]]:
    """Refresh once a second until `hold` refreshes in a row show a verdict satisfying `wanted` (counting only
    frames of the run at `after_s` seconds or later); returns the refresh that began that stretch and its frames."""
    streak: list[str] = []
    for refresh in range(1, limit + 1):
        time.sleep(REFRESH_S)
        frame = source.frame(LIVE_WINDOW_S)
        ok = frame.advice is not None and (frame.t or 0.0) >= after_s and wanted(frame.advice.verdict.kind)
        streak = streak + [frame_text(frame)] if ok else []
        if len(streak) == hold:
            return refresh - hold + 1, streak
    raise AssertionError(f"no settled verdict after {limit} refreshes:\n{frame_text(frame)}")


def test_the_verdict_follows_a_bottleneck_switched_on_and_off(tmp_path):
    folder = tmp_path / "switchable"
    argv = SWITCHABLE.argv(str(tmp_path), "switchable") + ["--train_for_seconds=150"]
    run = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.DEVNULL)
    try:
        source = LiveSource(folder)
        # past start-up, CartPole's own speed: not simulation-bound
        settles(source, lambda kind: kind != "simulation", 90, after_s=10.0)
        (folder / SWITCH_FILE).touch()
        taken_on, during = settles(source, lambda kind: kind == "simulation", 4 * FEW)
        (folder / SWITCH_FILE).unlink()
        taken_off, after = settles(source, lambda kind: kind != "simulation", 4 * FEW)
        print(f"switched on: {taken_on} refreshes; off: {taken_off}\n{during[-1]}\n{after[-1]}")
        assert taken_on <= FEW and taken_off <= FEW
        assert any("advice: --num_workers=" in frame for frame in during), during[-1]
        once = subprocess.run(
            [sys.executable, "-m", "sf.profile", "top", str(folder), "--once"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert once.returncode == 0 and "· running ·" in once.stdout, once.stdout + once.stderr
    finally:
        run.terminate()
        run.wait(timeout=60)
