"""A training command given a fixed number of seconds, its FPS read over a steady window of its own progress lines.

Both frameworks print a progress line every 5 s with the frames so far (`Total num frames: N`); the parent stamps
each line as it reads it. The window opens `warmup_s` after the first line that counts frames and lasts `window_s`,
so a slow start-up delays a run's window instead of eating it, and both sides of a comparison are measured over
windows of the same length and the same distance from their first frames. The rate is taken between the progress
lines nearest the window's ends: lines come every 5 s, so each end of the measured interval is within 2.5 s of the
window's. The run is stopped (SIGINT, then SIGKILL of its process group after a grace period) once a line at or
after the window's end is in, or at the deadline.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sf.bench.runs import ANSI, STOP_GRACE_S, _copy_output, stop_process_group
from sf.bench.suites import COLLECTED

Sample = tuple[float, int]  # (seconds since the run started, total frames)


@dataclass(frozen=True)
class Window:
    warmup_s: float  # after the first progress line that counts frames
    length_s: float
    startup_limit_s: float = 300.0  # a run with no frames by then is stopped


@dataclass
class TimedRun:
    framework: str  # "sf" or "Sample Factory"
    command: str
    log: str
    # "measured" (over the window); "ended early" (by itself) or "cut at the deadline" before the window closed,
    # `fps` over what it ran of it; "ended before two progress lines" (only `fps_whole_run`); "stopped at the
    # deadline", "no frames", "failed"
    status: str
    exit_code: int | None
    wall_s: float
    first_frames_s: float | None = None  # when the first line counting frames was read
    fps: float | None = None  # over `measured_s`
    fps_whole_run: float | None = None  # the run's own last line, `Collected {...}, FPS: X`, start-up included
    measured_s: tuple[float, float] | None = None  # the bracketing lines, seconds since start
    frames: int = 0  # the last line's count
    samples: list[Sample] = field(default_factory=list)


def steady_fps(samples: list[Sample], warmup_s: float, length_s: float) -> tuple[float, tuple[float, float]] | None:
    """(frames per second, (t_a, t_b)) between the lines nearest the window's ends, or None without two lines.

    The window is [t0 + warmup_s, t0 + warmup_s + length_s] with t0 the first line counting frames. Where the run
    ended before the window did, its last line closes the interval."""
    counting = [i for i, (_, frames) in enumerate(samples) if frames > 0]
    openers = [i for i in counting if i < len(samples) - 1]  # a line with one after it
    if not openers:
        return None
    start = samples[counting[0]][0] + warmup_s
    end = start + length_s
    a = min(openers, key=lambda i: abs(samples[i][0] - start))
    b = min(range(a + 1, len(samples)), key=lambda i: abs(samples[i][0] - end))
    (ta, fa), (tb, fb) = samples[a], samples[b]
    if tb <= ta:
        return None
    return (fb - fa) / (tb - ta), (ta, tb)


def window_closed(samples: list[Sample], warmup_s: float, length_s: float) -> bool:
    """A line at or after the window's end has been read."""
    first = next((t for t, frames in samples if frames > 0), None)
    return first is not None and samples[-1][0] >= first + warmup_s + length_s


def run_for(
    framework: str,
    cmd: list[str],
    cwd: Path,
    log_path: Path,
    window: Window,
    deadline: float | None = None,
    env: dict[str, str] | None = None,
    grace_s: float = STOP_GRACE_S,
) -> TimedRun:
    """Run `cmd` until its window has closed, it ends, it shows no frames within the start-up limit, or
    time.monotonic() reaches `deadline`; then stop it and measure."""
    start = time.monotonic()
    limit = start + window.startup_limit_s
    deadline = deadline if deadline is not None else float("inf")
    samples: list[tuple[float, int]] = []
    collecting = threading.Event()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**(env if env is not None else os.environ), "PYTHONUNBUFFERED": "1"},
        )
        reader = threading.Thread(target=_copy_output, args=(proc.stdout, log, collecting, samples), daemon=True)
        reader.start()
        try:
            at_deadline = False
            while proc.poll() is None:
                now = time.monotonic()
                if now >= deadline or (not collecting.is_set() and now >= limit):
                    at_deadline = now >= deadline
                    break
                if collecting.is_set() and window_closed(list(samples), window.warmup_s, window.length_s):
                    break
                time.sleep(0.1)
            stopped_early = proc.poll() is not None
            _interrupt(proc, grace_s)
        except BaseException:
            stop_process_group(proc, grace_s)
            raise
        reader.join(timeout=5.0)
    _reap_group(proc.pid)
    relative = [(t - start, frames) for t, frames in samples]
    result = TimedRun(
        framework=framework,
        command=shlex.join(cmd),
        log=str(log_path),
        status="no frames",
        exit_code=proc.returncode,
        wall_s=time.monotonic() - start,
        first_frames_s=next((t for t, frames in relative if frames > 0), None),
        frames=relative[-1][1] if relative else 0,
        samples=relative,
    )
    result.fps_whole_run = _collected_fps(log_path)
    measured = steady_fps(relative, window.warmup_s, window.length_s)
    if measured is not None:
        result.fps, result.measured_s = measured
        if stopped_early:
            result.status = "ended early"
        elif window_closed(relative, window.warmup_s, window.length_s):
            result.status = "measured"
        else:
            result.status = "cut at the deadline"
    elif stopped_early and proc.returncode not in (0, None):
        result.status = "failed"
    elif stopped_early and result.first_frames_s is not None:
        result.status = "ended before two progress lines"
    elif at_deadline:
        result.status = "stopped at the deadline"
    return result


def _collected_fps(log_path: Path) -> float | None:
    """The FPS of the last `Collected {...}, FPS: X` line in the log (both frameworks print it at exit)."""
    found = COLLECTED.findall(ANSI.sub("", log_path.read_text(errors="replace")))
    return float(found[-1]) if found else None


def _interrupt(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGINT to the run's main process (both frameworks stop and print their summaries on it), then the process
    group's SIGINT and SIGKILL (`sf.bench.runs.stop_process_group`) if it has not ended after `grace_s`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        stop_process_group(proc, grace_s / 3)


def _reap_group(pgid: int, wait_s: float = 2.0) -> None:
    """Kill what is left of the run's process group (its own session: only the run's processes are in it) once its
    main process has ended and the rest had `wait_s` to follow."""
    end = time.monotonic() + wait_s
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        if time.monotonic() >= end:
            break
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
