"""A serial run ends when asked, and ends by itself when stuck, whatever its env does: here an env call that never
returns, inside the one thread that runs everything."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

TESTS = Path(__file__).parent
ENV = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            str(TESTS / "hang_env.py"),
            "--env=hangs_later",
            "--serial_mode=True",
            "--num_workers=1",
            "--num_envs_per_worker=4",
            "--rollout=16",
            "--batch_size=64",
            "--use_rnn=False",
            "--save_every_sec=3600",
            "--train_for_env_steps=100000000",
            f"--train_dir={tmp_path}",
            "--experiment=hang",
            *extra,
        ],  # fmt: skip
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> float:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return time.monotonic()


@pytest.fixture
def killed_after():
    started: list[subprocess.Popen] = []
    yield started.append
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_ends_a_serial_run_stuck_in_an_env_within_the_stop_timeout(tmp_path, killed_after):
    proc = _start(tmp_path, "--stop_timeout_sec=2")
    killed_after(proc)
    _wait_for(tmp_path / "hanging", proc)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
    asked = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - asked
    assert proc.returncode == 0, out[-3000:]
    assert 2.0 <= took < 5.0, took
    summary = json.loads((tmp_path / "hang" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert "RolloutWorker_w0, inside env_step (env hangs_later), did not return" in summary["error"]
    assert list((tmp_path / "hang" / "checkpoint_p0").glob("checkpoint_*.pth"))  # saved what it could
    assert "Collected {0: " in out.splitlines()[-1]


def test_a_serial_run_stuck_past_the_heartbeat_timeout_ends_naming_the_env(tmp_path, killed_after):
    proc = _start(tmp_path, "--heartbeat_timeout_sec=2")
    killed_after(proc)
    hung = _wait_for(tmp_path / "hanging", proc)
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - hung
    assert proc.returncode == 1, out[-3000:]
    assert took < 5.0, took
    summary = json.loads((tmp_path / "hang" / "summary.json").read_text())
    assert summary["status"] == "error"
    assert summary["error"].startswith("RolloutWorker_w0, inside env_step (env hangs_later), for ")
    assert "(--heartbeat_timeout_sec=2): stopped or hung" in summary["error"]
