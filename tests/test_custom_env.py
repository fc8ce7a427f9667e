"""The custom-env example: GoalGate's spaces and rewards, and a short run of it through the registry."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_sf

from sf.envs.spaces import action_spec_from_space, obs_spec_from_space
from sf_examples.custom_env.goal_gate_env import EPISODE_STEPS, STEP_SIZE, GoalGateEnv


def test_goal_gate_rewards_progress_gate_and_goal():
    env = GoalGateEnv()
    obs, _ = env.reset(seed=3)
    gate = int(np.argmax(obs["gate"]))
    direction = (obs["goal"] - obs["pos"]) / np.linalg.norm(obs["goal"] - obs["pos"])
    before = np.linalg.norm(obs["goal"] - obs["pos"])
    obs2, reward, terminated, truncated, _ = env.step((gate, direction))
    after = np.linalg.norm(obs["goal"] - obs2["pos"])
    assert before - after == pytest.approx(min(STEP_SIZE, before), abs=1e-5)  # a unit step straight at the goal
    assert reward == pytest.approx((before - after) + 0.1 + (1.0 if after < 0.15 else 0.0), abs=1e-5)
    assert not terminated and not truncated
    for _ in range(EPISODE_STEPS - 1):
        *_, truncated, _ = env.step((0, np.zeros(2, np.float32)))
    assert truncated


def test_goal_gate_spaces_map_to_dict_obs_and_mixed_actions():
    env = GoalGateEnv()
    assert obs_spec_from_space(env.observation_space) == {
        "pos": ((2,), np.dtype(np.float32)),
        "goal": ((2,), np.dtype(np.float32)),
        "gate": ((3,), np.dtype(np.float32)),
    }
    spec = action_spec_from_space(env.action_space)
    assert spec.discrete_sizes == (3,) and spec.continuous_dim == 2


def test_custom_env_example_trains_through_the_registry(tmp_path):
    result = run_sf(
        [
            "--env=goal_gate",
            "--serial_mode=True",
            "--num_workers=1",
            "--num_envs_per_worker=2",
            "--train_for_env_steps=1024",
            "--rollout=16",
            "--batch_size=256",
            "--rnn_size=16",
            "--encoder_mlp_layers",
            "16",
            f"--train_dir={tmp_path}",
            "--experiment=gg",
        ],
        module="sf_examples.custom_env.train_custom_env",
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((tmp_path / "gg" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 1024
    assert summary["num_episodes"] >= 1024 // EPISODE_STEPS - 2
    config = json.loads((tmp_path / "gg" / "config.json").read_text())
    assert config["use_rnn"] is True and config["encoder_mlp_layers"] == [16]  # base defaults, no family's
