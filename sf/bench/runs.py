"""One training command as a child process, read back through the files every run writes.

The run's own `summary.json` gives its FPS (`fps`: the figure of its last line `Collected {...}, FPS: X`, start-up
included; `fps_steady`: after its first batch); `python -m sf.profile report <dir> --json` gives the verdict.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sf.analysis.bottleneck import KINDS
from sf.experiment.config_file import read_config_or_empty

REPORT_TIMEOUT_S = 120.0
STOP_GRACE_S = 15.0  # a run told to stop prints its trees and writes its summary within this
FRAMES = re.compile(r"Total num frames: (\d+)")  # the runner's progress line
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class RunResult:
    command: str
    experiment_dir: str
    status: str  # the run's summary status ("ok"; "interrupted" when stopped after its measured time), or "failed"
    fps: float  # env frames per second over the whole run, start-up included (its Collected line)
    fps_steady: float | None  # after the first batch; None when the run never got that far
    wall_s: float  # of the child process, start to exit

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "interrupted") and self.fps > 0

    @property
    def best_fps(self) -> float:
        """The steady rate when the run has one, else the whole-run rate."""
        return self.fps_steady if self.fps_steady else self.fps


def training_command(module: str, flags: list[str], train_dir: Path, experiment: str) -> list[str]:
    """The user's flags, then the benchmark's own; argparse keeps the last value of a repeated flag."""
    return [
        sys.executable,
        "-m",
        module,
        *flags,
        "--benchmark=True",
        f"--train_dir={train_dir}",
        f"--experiment={experiment}",
        "--restart_behavior=overwrite",
    ]


def merge_flags(base: list[str], overrides: list[str]) -> list[str]:
    """`base` less every flag `overrides` sets again, then `overrides` (each flag once, its last setting): the
    command line argparse would resolve, written once. A flag is `--name=value` or `--name` with the words up to the
    next `--`."""
    groups = _flag_groups(overrides)
    last = {name: i for i, (name, _) in enumerate(groups) if name is not None}
    kept = [tokens for name, tokens in _flag_groups(base) if name not in last]
    kept += [tokens for i, (name, tokens) in enumerate(groups) if name is None or last[name] == i]
    return [token for tokens in kept for token in tokens]


def _flag_groups(argv: list[str]) -> list[tuple[str | None, list[str]]]:
    groups: list[tuple[str | None, list[str]]] = []
    for token in argv:
        if token.startswith("--"):
            groups.append((token[2:].split("=", 1)[0], [token]))
        elif groups:
            groups[-1][1].append(token)
        else:
            groups.append((None, [token]))  # a leading word (a module name): kept in place
    return groups


def run_training(
    module: str,
    flags: list[str],
    train_dir: Path,
    experiment: str,
    measure_s: float | None = None,
    deadline: float | None = None,
    grace_s: float = STOP_GRACE_S,
) -> RunResult:
    """Run the training command, its output in `<train_dir>/<experiment>.log`.

    With `measure_s`, the run is stopped (SIGINT, a graceful stop) that long after it first reports frames, so
    start-up, however slow on a loaded machine, does not eat the measured time. At `deadline` (time.monotonic())
    it is stopped whatever it is doing, and killed if it has not ended `grace_s` later.
    """
    cmd = training_command(module, flags, train_dir, experiment)
    exp_dir = train_dir / experiment
    train_dir.mkdir(parents=True, exist_ok=True)
    summary_path = exp_dir / "summary.json"
    summary_path.unlink(missing_ok=True)
    start = time.monotonic()
    with open(train_dir / f"{experiment}.log", "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        collecting = threading.Event()
        reader = threading.Thread(target=_copy_output, args=(proc.stdout, log, collecting), daemon=True)
        reader.start()
        try:
            killed = _supervise(proc, collecting, measure_s, deadline, grace_s)
        except BaseException:
            stop_process_group(proc, grace_s)
            raise
        reader.join(timeout=5.0)
    wall = time.monotonic() - start
    summary = json.loads(summary_path.read_text()) if summary_path.exists() and not killed else {}
    return RunResult(
        command="python " + shlex.join(cmd[1:]),
        experiment_dir=str(exp_dir),
        status=summary.get("status") or ("killed" if killed else "failed"),
        fps=float(summary.get("fps") or 0.0),
        fps_steady=summary.get("fps_steady"),
        wall_s=wall,
    )


def _copy_output(stream, log, collecting: threading.Event, samples: list[tuple[float, int]] | None = None) -> None:
    """Tee the child's output into its log file; flag the first progress line that counts frames. With `samples`,
    append (time.monotonic() when read, frames) for every progress line."""
    for line in stream:
        log.write(line)
        if collecting.is_set() and samples is None:
            continue
        found = FRAMES.search(ANSI.sub("", line))
        if found is None:
            continue
        frames = int(found.group(1))
        if samples is not None:
            samples.append((time.monotonic(), frames))
        if frames > 0:
            collecting.set()
    log.flush()


def _supervise(
    proc: subprocess.Popen, collecting: threading.Event, measure_s: float | None, deadline: float | None, grace_s: float
) -> bool:
    """Wait for the child, stopping it as `run_training` says. True when it had to be killed."""

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    if measure_s is not None:
        while proc.poll() is None and not collecting.wait(timeout=0.2):
            if left() == 0.0:
                break
        if proc.poll() is None and collecting.is_set():
            stop_at = time.monotonic() + measure_s
            if deadline is not None:
                stop_at = min(stop_at, deadline)
            try:
                proc.wait(timeout=max(0.0, stop_at - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=left())
        return False
    except subprocess.TimeoutExpired:
        return stop_process_group(proc, grace_s)


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> bool:
    """SIGINT to the run's whole process group, SIGKILL after `grace_s`. True when it had to be killed."""
    if proc.poll() is not None:
        return False
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def resolved_inference_placement(experiment_dir: str | Path) -> str | None:
    """The `--inference_placement` a run resolved `auto` to, from its config.json; None when it wrote none."""
    return read_config_or_empty(experiment_dir).get("inference_placement")


def resolved_precision(experiment_dir: str | Path) -> dict | None:
    """What the run's image encoder computed in and why (`precision_in_use` of its config.json), or None."""
    return read_config_or_empty(experiment_dir).get("precision_in_use")


def profile_report(experiment_dir: str | Path, timeout: float = REPORT_TIMEOUT_S) -> dict | None:
    """What `python -m sf.profile report --json` says of a run, or None when the report is not available."""
    cmd = [sys.executable, "-m", "sf.profile", "report", str(experiment_dir), "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return load_report(proc.stdout) if proc.returncode == 0 else None


def load_report(report_json: str) -> dict | None:
    """The report's JSON object from its output (which may start with log lines), or None."""
    start = report_json.find("{")
    if start < 0:
        return None
    try:
        report = json.loads(report_json[start:])
    except json.JSONDecodeError:
        return None
    return report if isinstance(report, dict) else None


def profile_verdict(experiment_dir: str | Path, timeout: float = REPORT_TIMEOUT_S) -> str | None:
    """The bottleneck kind ("simulation", ...) that the profile report names, or None when it names none."""
    return verdict_of(profile_report(experiment_dir, timeout))


def verdict_of(report: dict | None) -> str | None:
    """The kind named by the report's "verdict" field: a string such as "learner-bound", or an object with "kind"."""
    verdict = report.get("verdict") if report else None
    if isinstance(verdict, dict):
        verdict = verdict.get("kind") or verdict.get("verdict")
    if not isinstance(verdict, str):
        return None
    kind = verdict.strip().lower().removeprefix("verdict:").strip().removesuffix("-bound")
    return kind if kind in KINDS else None


@dataclass(frozen=True)
class LearnerCore:
    """How fast a run could go with its one-thread learner on a core of its own: the report window's FPS over the
    cores the learner's process used in that window. A learner sharing its core with collection runs on part of
    one; its arithmetic per frame stays, so this is the most a faster collection or a quieter machine can give
    while the learner does the same work."""

    cores: float  # of the busiest learner's process, at most 1
    fps_alone: float  # the window's FPS over `cores`

    @classmethod
    def of(cls, report: dict | None) -> LearnerCore | None:
        if not report or not report.get("fps"):
            return None
        cores = [c.get("cpu") for c in report.get("components", []) if c.get("role") == "Learner"]
        if not cores or any(not isinstance(c, (int, float)) or c <= 0 for c in cores):
            return None
        busiest = min(max(cores), 1.0)
        return cls(busiest, float(report["fps"]) / busiest)
