"""One run per experiment folder: a second run is refused with the holder named, a dead holder's lock is taken over,
and the lock lives as long as any process of the run."""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, read_until, started_pids

from sf.experiment import lock as experiment_lock
from sf.experiment.lock import LOCK_FILE, ExperimentLock, share_held
from sf.utils.errors import ConfigError

ENV = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
TRAIN = [sys.executable, "-m", "sf_examples.train_gym_env", "--env=CartPole-v1", "--serial_mode=True"]


def test_a_second_lock_on_the_folder_is_refused_naming_the_holder(tmp_path):
    (tmp_path / "exp").mkdir()
    with ExperimentLock(tmp_path / "exp"):
        with pytest.raises(ConfigError) as refused:
            ExperimentLock(tmp_path / "exp").acquire()
        assert f"pid {os.getpid()} on {socket.gethostname()}" in str(refused.value)
        assert refused.value.flag == "--experiment"
    with ExperimentLock(tmp_path / "exp"):  # released: free again
        pass
    assert not (tmp_path / "exp" / LOCK_FILE).exists() and (tmp_path / "exp").is_dir()


def test_a_folder_the_lock_made_goes_with_it_when_the_run_wrote_nothing_else(tmp_path):
    with ExperimentLock(tmp_path / "refused"):
        pass
    assert not (tmp_path / "refused").exists()
    with ExperimentLock(tmp_path / "ran"):
        (tmp_path / "ran" / "config.json").write_text("{}")
    assert [path.name for path in (tmp_path / "ran").iterdir()] == ["config.json"]


def test_a_lock_left_by_a_dead_run_is_taken_over_with_a_warning(tmp_path, caplog):
    folder = tmp_path / "exp"
    folder.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = {"pid": int(dead.stdout), "host": "elsewhere", "started": "2026-01-01 00:00:00", "command": "x"}
    (folder / LOCK_FILE).write_text(json.dumps(left))
    lock = ExperimentLock(folder)
    lock.acquire()
    try:
        assert f"pid {left['pid']} on elsewhere" in caplog.text and "taking over" in caplog.text
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()
    finally:
        lock.release()


def test_the_same_experiment_started_twice_exits_2_and_writes_nothing(tmp_path):
    first = subprocess.Popen(
        [*TRAIN, "--train_for_env_steps=100000000", f"--train_dir={tmp_path}", "--experiment=twice"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        read_until(first, r"Fps is", [])
        folder = tmp_path / "twice"
        before = {path.name for path in folder.iterdir()}
        config = (folder / "config.json").read_bytes()
        second = subprocess.run(
            [*TRAIN, "--train_for_env_steps=1000", f"--train_dir={tmp_path}", "--experiment=twice"]
            + ["--restart_behavior=overwrite"],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stderr[-2000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sf: error: --experiment:"), second.stderr
        assert f"pid {first.pid} on {socket.gethostname()}" in lines[0]
        assert {path.name for path in folder.iterdir()} >= before  # nothing removed (--restart_behavior=overwrite)
        assert (folder / "config.json").read_bytes() == config  # nor written
    finally:
        os.killpg(first.pid, signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 0


def _hold_until_told(share, told) -> None:
    told.wait()


def test_a_component_process_keeps_the_lock_after_the_main_process_lets_its_descriptor_go(tmp_path):
    """The main process's descriptor closed without a release (as a kill -9 closes it): the component it started
    still holds the lock, and a second run is refused naming the component, until it ends."""
    ctx = mp.get_context("forkserver")
    told = ctx.Event()
    lock = ExperimentLock(tmp_path / "exp")
    lock.acquire()
    child = ctx.Process(target=_hold_until_told, args=(share_held(), told), daemon=True)
    child.start()
    os.close(lock.fd)  # what the death of the main process does to its own descriptor: no release
    experiment_lock._held.remove(lock)
    try:
        with pytest.raises(ConfigError) as refused:
            ExperimentLock(tmp_path / "exp").acquire()
        message = str(refused.value)  # the fork server may still hold the duplicate it passed on: named too
        assert "its main process is gone, the lock still held by pid " in message and f"pid {child.pid} " in message
    finally:
        told.set()
        child.join(30)
    second = ExperimentLock(tmp_path / "exp")
    second.acquire()  # the last holder gone: free, taken over from the record the main process left
    second.release()


def test_a_file_system_without_locks_is_named_not_called_unwritable(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(experiment_lock.fcntl, "flock", no_locks)
    with pytest.raises(ConfigError) as refused:
        ExperimentLock(tmp_path / "exp").acquire()
    assert refused.value.flag == "--train_dir"
    message = str(refused.value)
    assert f"the file system there ({experiment_lock.file_system(tmp_path)})" in message
    assert "does not support file locks (No locks available)" in message and "cannot write" not in message
    fs_type = next(
        line.split(" - ")[1].split()[0]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4] == _mount_point(tmp_path)
    )
    assert message.count(fs_type) >= 1


def _mount_point(path: Path) -> str:
    path = path.resolve()
    while not os.path.ismount(path):
        path = path.parent
    return str(path)


def _lock_holders(folder: Path) -> list[int]:
    fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    try:
        return experiment_lock.holders(fd)
    finally:
        os.close(fd)


def test_a_second_run_is_refused_while_a_learner_of_a_killed_run_lives(tmp_path):
    """The main process of a parallel run is killed with SIGKILL while its components are stopped (a slow learner):
    a second run is refused, naming the dead main process and the components that hold the lock, and writes
    nothing; once they have ended, the folder is free."""
    folder = tmp_path / "orphaned"
    first = subprocess.Popen(
        [sys.executable, "-m", "sf_examples.train_gym_env", "--env=CartPole-v1", "--num_workers=2",
         "--num_envs_per_worker=2", "--train_for_env_steps=100000000", f"--train_dir={tmp_path}",
         "--experiment=orphaned"],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    components: list[int] = []
    try:
        read_until(first, r"Fps is", lines)
        components = list(started_pids(lines).values())
        assert {first.pid, *components} <= set(_lock_holders(folder))
        for pid in components:
            os.kill(pid, signal.SIGSTOP)
        first.kill()
        first.wait(30)
        before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
        second = subprocess.run(
            [*TRAIN, "--train_for_env_steps=1000", f"--train_dir={tmp_path}", "--experiment=orphaned"],
            cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 2, second.stderr[-2000:]
        (line,) = second.stderr.strip().splitlines()
        assert line.startswith("sf: error: --experiment:") and f"pid {first.pid} on {socket.gethostname()}" in line
        assert "its main process is gone, the lock still held by" in line
        assert all(f"pid {pid} " in line for pid in components), line
        assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before
    finally:
        for pid in components:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while _lock_holders(folder) and time.monotonic() < deadline:  # each component stops on its own, its parent gone
        time.sleep(0.1)
    assert _lock_holders(folder) == []
    lock = ExperimentLock(folder)
    lock.acquire()
    lock.release()
