"""One run per experiment folder: a second run is refused with the holder named, a dead holder's lock is taken over."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from conftest import ROOT, read_until

from sf.experiment.lock import LOCK_FILE, ExperimentLock
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
