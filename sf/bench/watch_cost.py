"""What watching a run costs: the CartPole suite of `sf.benchmark`, run alternately unwatched and watched by
`python -m sf.profile top` in an 80x24 pseudo-terminal (redrawing every second, as a user would see it), in one
invocation; each watched run's ratio is its FPS over the mean of the unwatched runs on either side of it, which
cancels a machine whose load drifts. Beside FPS it records the watcher's own CPU seconds per second of the run, the
direct cost, which a machine shared with other work disturbs far less than throughput. With `--before <source tree>`
the unwatched runs alternate with the same command run from another checkout (the code before the live feed), to
price the feed itself.

    python -m sf.bench.watch_cost [--rounds 3] [--frames 1000000] [--before /path/to/other/tree] [--out f.json]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import resource
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

from sf.bench.suites import COLLECTED, SUITES


def _train(suite, frames: int, train_dir: str, cwd: Path, watch: bool) -> tuple[float, dict]:
    """One run; with `watch`, `sf.profile top` follows it in a pseudo-terminal until it ends. Returns the run's FPS
    and what was seen: the run's CPU seconds per million frames (its whole process tree, the watcher's left out) and,
    when watched, the frames the watcher drew and its CPU seconds per second of the run."""
    before = _children_cpu_s()
    cmd = [sys.executable, "-m", suite.module, *suite.flags, f"--train_for_env_steps={frames}"]
    cmd += [f"--train_dir={train_dir}", "--experiment=bench"]
    run = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict = {}
    watcher = None
    if watch:
        watcher = threading.Thread(target=_watch, args=(Path(train_dir) / "bench", run, seen), daemon=True)
        watcher.start()
    out = run.communicate()[0]
    if watcher is not None:
        watcher.join(timeout=30)
    found = COLLECTED.findall(out)
    if run.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(cmd)} failed ({run.returncode}):\n{out[-2000:]}")
    seen["run_cpu_per_mframe"] = (_children_cpu_s() - before - seen.get("cpu_s", 0.0)) * 1e6 / frames
    return float(found[-1]), seen


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _watch(experiment_dir: Path, run: subprocess.Popen, seen: dict) -> None:
    """`sf.profile top` in an 80x24 pseudo-terminal while the run lives; `q` when it has ended."""
    while not experiment_dir.exists() and run.poll() is None:
        time.sleep(0.1)
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    top = subprocess.Popen(
        [sys.executable, "-m", "sf.profile", "top", str(experiment_dir)],
        stdin=child,
        stdout=child,
        stderr=child,
        env=dict(os.environ, TERM="xterm-256color"),
    )
    os.close(child)
    began, drawn = time.monotonic(), 0
    while run.poll() is None:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                drawn += os.read(main, 65536).count(b"sf top")
            except OSError:
                break
    with open(f"/proc/{top.pid}/stat") as f:  # utime and stime, in clock ticks
        ticks = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
    cpu_s = ticks / os.sysconf("SC_CLK_TCK")
    seen.update(drawn=drawn, cpu_s=cpu_s, cpu_per_s=cpu_s / (time.monotonic() - began))
    os.write(main, b"q")
    top.wait(timeout=10)
    os.close(main)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--before", default=None, help="another source tree whose unwatched runs alternate too")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    suite = SUITES["cartpole"]
    repo = Path(__file__).resolve().parents[2]
    arms = ["unwatched", "watched"] + (["before"] if args.before else [])
    fps: dict[str, list[float]] = {arm: [] for arm in arms}
    watcher_cpu: list[float] = []
    run_cpu: dict[str, list[float]] = {arm: [] for arm in arms}
    sequence = ["unwatched"]
    for _ in range(args.rounds):
        sequence += ["watched", "unwatched"] + (["before", "unwatched"] if args.before else [])
    for arm in sequence:
        with tempfile.TemporaryDirectory(prefix="sf_watch_") as train_dir:
            cwd = Path(args.before) if arm == "before" else repo
            value, seen = _train(suite, args.frames, train_dir, cwd, arm == "watched")
        fps[arm].append(value)
        run_cpu[arm].append(seen["run_cpu_per_mframe"])
        note = f"  run CPU {seen['run_cpu_per_mframe']:.1f} s per 1M frames"
        if "drawn" in seen:
            watcher_cpu.append(seen["cpu_per_s"])
            note += f"; sf.profile top drew {seen['drawn']} frames, {seen['cpu_per_s']:.4f} CPU s per s"
        print(f"{arm:<10} {value:>10,.0f} FPS{note}", flush=True)
    ratios = {}
    for arm in arms[1:]:
        ratios[arm] = [neighbours_ratio(sequence, fps, i) for i, a in enumerate(sequence) if a == arm]
        listed = ", ".join(f"{r:.3f}" for r in ratios[arm])
        print(f"{arm} / unwatched around it: {listed}; mean {statistics.mean(ratios[arm]):.3f}")
    for arm in arms:
        print(f"{arm}: run CPU {statistics.mean(run_cpu[arm]):.1f} s per 1M frames (mean of {len(run_cpu[arm])})")
    if watcher_cpu:
        print(f"sf.profile top used {statistics.mean(watcher_cpu):.4f} CPU seconds per second of the run (mean)")
    if args.out:
        record = {"fps": fps, "sequence": sequence, "ratios": ratios, "watcher_cpu_per_s": watcher_cpu}
        record["run_cpu_s_per_mframe"] = run_cpu
        Path(args.out).write_text(json.dumps(record, indent=2))
    return 0


def neighbours_ratio(sequence: list[str], fps: dict[str, list[float]], index: int) -> float:
    """The FPS of the run at `index` over the mean of the unwatched runs just before and after it."""

    def value(i: int) -> float:
        return fps[sequence[i]][sequence[:i].count(sequence[i])]

    return value(index) / statistics.mean([value(index - 1), value(index + 1)])


if __name__ == "__main__":
    sys.exit(main())
