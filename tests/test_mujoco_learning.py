"""MuJoCo learning with the example's defaults and the acceptance thresholds (slow: about 20 s to a few minutes
each)."""

from __future__ import annotations

import json

import pytest
from conftest import run_sf

pytest.importorskip("mujoco")

TRAIN = "sf_examples.mujoco.train_mujoco"


def _train(train_dir, *args: str, timeout: float) -> dict:
    result = run_sf([*args, f"--train_dir={train_dir}", "--experiment=learn"], module=TRAIN, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((train_dir / "learn" / "summary.json").read_text())
    assert summary["status"] == "ok"
    return summary


@pytest.mark.slow
def test_pendulum_serial_reaches_950(tmp_path):
    """The pendulum acceptance command; Sample Factory 2.1.1 reaches about 710 with it."""
    summary = _train(
        tmp_path,
        "--env=mujoco_pendulum",
        "--serial_mode=True",
        "--async_rl=False",
        "--train_for_env_steps=150000",
        "--seed=1",
        timeout=600,
    )
    assert summary["env_frames"]["0"] >= 150_000
    assert summary["avg_episode_reward"]["0"] >= 950


@pytest.mark.slow
def test_pendulum_parallel_learns(tmp_path):
    """The same task with every component in its own process: the policy must balance for hundreds of steps."""
    summary = _train(tmp_path, "--env=mujoco_pendulum", "--train_for_env_steps=150000", "--seed=1", timeout=600)
    assert summary["avg_episode_reward"]["0"] >= 800


@pytest.mark.slow
def test_halfcheetah_serial_beats_sample_factory(tmp_path):
    """1M frames; Sample Factory 2.1.1 reaches about 2,400 with the same flags."""
    summary = _train(
        tmp_path,
        "--env=mujoco_halfcheetah",
        "--serial_mode=True",
        "--async_rl=False",
        "--train_for_env_steps=1000000",
        "--seed=1",
        timeout=900,
    )
    assert summary["avg_episode_reward"]["0"] >= 2400


@pytest.mark.slow
def test_halfcheetah_through_envpool_learns_as_the_gymnasium_path(tmp_path):
    """The same command stepped through EnvPool (docs/envpool.md records both runs side by side)."""
    pytest.importorskip("envpool")
    summary = _train(
        tmp_path,
        "--env=mujoco_halfcheetah",
        "--envpool=True",
        "--serial_mode=True",
        "--async_rl=False",
        "--train_for_env_steps=1000000",
        "--seed=1",
        timeout=900,
    )
    assert summary["avg_episode_reward"]["0"] >= 2400
