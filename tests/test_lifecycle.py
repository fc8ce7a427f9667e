"""A run's life as an operator sees it: launched in the background, stopped by SIGTERM, hit by SIGKILL.

Every run starts in its own session, and every process of that session is killed at the end of the test,
whatever happened.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LAYOUT, ROOT, read_until, started_pids

from sf.supervision.orphans import shm_files

FAST = [*LAYOUT]
DOOM = [
    "--env=doom_basic",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--batch_size=256",
    "--seed=1",
    "--save_every_sec=3600",
    "--train_for_env_steps=100000000",
]
COMPONENTS = ("Batcher 0", "InferenceWorker_p0-w0", "Learner 0", "RolloutWorker_w0", "RolloutWorker_w1", "Runner")
ENV = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def _stat(pid: int) -> list[str] | None:
    """Fields after the command name: state, ppid, pgrp, session, ..."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _session_processes(sid: int) -> list[int]:
    """Live (not zombie) processes of a session."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _no_process_left(sid: int, deadline_s: float = 10.0) -> bool:
    """The run's process tree is gone: its resource tracker may take a moment after the main process."""
    deadline = time.monotonic() + deadline_s
    while _session_processes(sid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _leaked_vizdoom_shm(before: set[str]) -> set[str]:
    """VizDoom engine files created in /dev/shm since `before` that no live process holds (other programs on
    the machine may create their own files meanwhile)."""
    new = {name for name in os.listdir("/dev/shm") if name.startswith("ViZDoom")} - before
    in_use = set().union(*(shm_files(int(p.name)) for p in Path("/proc").glob("[0-9]*")))
    return {name for name in new if f"/dev/shm/{name}" not in in_use}


@pytest.fixture
def sessions():
    """Session ids of the runs a test starts; all their processes are killed afterwards."""
    started: list[int] = []
    yield started
    for sid in started:
        for pid in _session_processes(sid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _start(args: list[str], sessions: list[int], module: str = "sf_examples.train_gym_env") -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    sessions.append(proc.pid)
    return proc


def _summary(path: Path, deadline_s: float) -> dict:
    """Wait for the run to end: summary.json is written once, atomically, when it does."""
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} after {deadline_s} s"
        time.sleep(0.2)
    return json.loads(path.read_text())


@pytest.mark.parametrize("launcher", [pytest.param("nohup", marks=pytest.mark.slow), "setsid"])
def test_a_run_outlives_the_shell_that_launched_it(tmp_path, sessions, launcher):
    log, pidfile = tmp_path / "run.log", tmp_path / "run.pid"
    run = shlex.join(
        [
            sys.executable,
            "-m",
            "sf_examples.train_gym_env",
            "--env=CartPole-v1",
            *FAST,
            "--train_for_env_steps=20000",
            f"--train_dir={tmp_path}",
            "--experiment=bg",
        ]
    )
    # the shell backgrounds the run, waits until its main loop reports, then exits: the run loses its parent
    script = (
        f"{launcher} {run} > {log} 2>&1 & echo $! > {pidfile}; "
        f"for i in $(seq 3000); do grep -q 'Fps is' {log} && exit 0; sleep 0.1; done; exit 1"
    )
    shell = subprocess.Popen(["sh", "-c", script], cwd=ROOT, env=ENV, start_new_session=True)
    sessions.append(shell.pid)
    assert shell.wait(timeout=400) == 0, log.read_text()[-3000:]
    run_pid = int(pidfile.read_text())
    sessions.append(run_pid)  # under setsid the run is a session of its own
    summary = _summary(tmp_path / "bg" / "summary.json", deadline_s=400)
    assert summary["status"] == "ok", summary
    assert summary["env_frames"]["0"] >= 20000
    assert _stat(run_pid) is None or _stat(run_pid)[1] != str(shell.pid)  # it did lose its launcher
    assert "Collected {0: " in log.read_text()


@pytest.mark.slow
def test_a_learner_iteration_longer_than_the_stop_timeout_is_killed_with_a_warning(tmp_path, sessions):
    # one training iteration never ends within the test: 10^7 epochs over the first batch
    proc = _start(
        [
            "--env=CartPole-v1",
            *FAST,
            "--num_epochs=10000000",
            "--stop_timeout_sec=1",
            "--train_for_env_steps=100000000",
            f"--train_dir={tmp_path}",
            "--experiment=slow",
        ],
        sessions,
    )
    lines: list[str] = []
    read_until(proc, r"Learner 0 ready at policy version 0", lines)  # past its start: a kill now loses an iteration
    read_until(proc, r"Avg episode reward: \[\(0, '-?\d", lines)  # episodes ended, so the first batch is on its way
    read_until(proc, r"Fps is", lines)
    os.killpg(proc.pid, signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    out = "".join(lines) + rest
    assert proc.returncode == 0, out[-3000:]
    assert _summary(tmp_path / "slow" / "summary.json", 0)["status"] == "interrupted"
    warning = [line for line in out.splitlines() if "Learner 0 did not stop" in line]
    assert warning and "--stop_timeout_sec" in warning[0], out[-3000:]
    assert not list((tmp_path / "slow").glob("checkpoint_p0/*.pth"))  # killed mid-iteration: nothing saved
    assert _no_process_left(proc.pid)


@pytest.mark.slow
def test_sigterm_to_the_process_group_stops_a_vizdoom_run_in_order(tmp_path, sessions):
    pytest.importorskip("vizdoom")
    shm_before = set(os.listdir("/dev/shm"))
    proc = _start(
        [*DOOM, "--stop_timeout_sec=60", f"--train_dir={tmp_path}", "--experiment=term"],
        sessions,
        module="sf_examples.vizdoom.train_vizdoom",
    )
    lines: list[str] = []
    read_until(proc, r"Total num frames: [1-9]", lines)
    os.killpg(proc.pid, signal.SIGTERM)  # what Slurm, Docker and systemd send
    rest, _ = proc.communicate(timeout=120)
    out = "".join(lines) + rest
    assert proc.returncode == 0, out[-3000:]
    summary = json.loads((tmp_path / "term" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["error"] is None
    assert list((tmp_path / "term" / "checkpoint_p0").glob("checkpoint_*.pth"))  # the final save, nothing periodic
    for name in COMPONENTS:
        assert f"{name} profile tree view:" in out
    assert set(json.loads((tmp_path / "term" / "profile.json").read_text())) == set(COMPONENTS)
    assert "did not stop" not in out and "left behind" not in out
    assert _no_process_left(proc.pid)  # no component and no VizDoom engine
    assert not _leaked_vizdoom_shm(shm_before)


@pytest.mark.slow
@pytest.mark.parametrize("component", ["RolloutWorker_w0", "InferenceWorker_p0-w0", "Learner 0"])
def test_a_component_killed_with_sigkill_ends_the_run_within_5_s(tmp_path, sessions, component):
    pytest.importorskip("vizdoom")
    shm_before = set(os.listdir("/dev/shm"))
    proc = _start(
        [*DOOM, f"--train_dir={tmp_path}", "--experiment=kill"], sessions, module="sf_examples.vizdoom.train_vizdoom"
    )
    lines: list[str] = []
    read_until(proc, r"Total num frames: [1-9]", lines)
    os.kill(started_pids(lines)[component], signal.SIGKILL)
    killed_at = time.monotonic()
    rest, _ = proc.communicate(timeout=60)  # returns once the run exited and nothing holds its output any more
    took = time.monotonic() - killed_at
    out = "".join(lines) + rest
    assert proc.returncode == 1, out[-3000:]
    summary = json.loads((tmp_path / "kill" / "summary.json").read_text())
    assert summary["status"] == "error" and component in summary["error"]
    assert took < 5, took
    assert _no_process_left(proc.pid)  # a killed worker's engines were ended too
    assert not _leaked_vizdoom_shm(shm_before)
