"""`sf.profile top` on a real run while a bottleneck is switched on and off: the simulator of
`induced_bottlenecks --watch` sleeps 2 ms a step only while a file exists, and the verdict on screen must follow
within a few one-second refreshes, as a user watching it would see."""

import os
import subprocess
import sys
import time

import pytest

from sf.profiling.recent import LIVE_WINDOW_S
from sf.profiling.top import LiveSource, frame_text
from sf_examples.profiling.induced_bottlenecks import SWITCHABLE
from sf_examples.profiling.sleepy_env import SWITCH_FILE
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

REFRESH_S = 1.0
FEW = 6  # refreshes: the verdict covers the last 4 s, snapshots arrive every 2 s, envs look at the switch twice a s


def verdict_after(source: LiveSource, wanted, limit: int) -> tuple[int, str]:
    """Refresh once a second until the frame's verdict satisfies `wanted`; (refreshes taken, last frame)."""
    text = ""
    for refresh in range(1, limit + 1):
        time.sleep(REFRESH_S)
        frame = source.frame(LIVE_WINDOW_S)
        text = frame_text(frame)
        if frame.advice is not None and wanted(frame.advice.verdict.kind):
            return refresh, text
    raise AssertionError(f"no matching verdict after {limit} refreshes:\n{text}")


def test_the_verdict_follows_a_bottleneck_switched_on_and_off(tmp_path):
    folder = tmp_path / "switchable"
    argv = SWITCHABLE.argv(str(tmp_path), "switchable") + ["--train_for_seconds=120"]
    run = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.DEVNULL)
    try:
        source = LiveSource(folder)
        _, before = verdict_after(source, lambda kind: kind != "simulation", 60)
        (folder / SWITCH_FILE).touch()
        taken_on, during = verdict_after(source, lambda kind: kind == "simulation", 3 * FEW)
        (folder / SWITCH_FILE).unlink()
        taken_off, after = verdict_after(source, lambda kind: kind != "simulation", 3 * FEW)
        print(f"switched on: {taken_on} refreshes; off: {taken_off}\n{before}\n{during}\n{after}")
        assert taken_on <= FEW and taken_off <= FEW
        assert "verdict simulation-bound" in during and "advice: --num_workers=" in during
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
