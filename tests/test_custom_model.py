"""The custom-model example (sf_examples/custom_model): its family registers the set encoder with the model factory,
the encoder reads the items as a set, the env pays what its docstring says; slow: a training run with it learns the
env, and the cross-stack breakdown gives the encoder rows of its own."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import run_sf

from sf.envs.families import family_named
from sf.model.factory import custom_model_parts
from sf.runner.build import build_model, probe_env
from sf_examples.custom_model.collect_env import SCENT, SCENT_RANGE, TOUCH_RADIUS, CollectEnv
from sf_examples.custom_model.train_custom_model import SetEncoder

RANDOM_RETURN = 0.7  # a uniformly random policy, per episode (collect_env.py)
LEARNED_RETURN = 5.0


def _model():
    family = family_named("custom_model")
    cfg = family.parse_cfg(["--env=collect", "--seed=1"])
    return build_model(cfg, probe_env(cfg), "cpu")


def test_the_family_builds_the_set_encoder_and_it_ignores_the_order_of_the_items():
    model = _model()
    assert isinstance(model.encoders[0], SetEncoder) and custom_model_parts(model) == ["encoder SetEncoder"]
    obs = {"agent": torch.rand(3, 2), "entities": torch.randn(3, 6, 3)}
    shuffled = {"agent": obs["agent"], "entities": obs["entities"][:, torch.randperm(6)]}
    with torch.no_grad():
        features, reordered = model.forward_head(obs), model.forward_head(shuffled)
        other = model.forward_head({"agent": obs["agent"], "entities": torch.randn(3, 6, 3)})
    torch.testing.assert_close(features, reordered)
    assert not torch.allclose(features, other)


def test_the_env_pays_its_items_and_their_scent():
    env = CollectEnv()
    obs, _ = env.reset(seed=4)
    for action in [1, 2, 3, 4, 0] * 10:
        before = obs["entities"].copy()
        obs, reward, terminated, truncated, _ = env.step(action)
        move = {0: (0, 0), 1: (0, 0.1), 2: (0, -0.1), 3: (-0.1, 0), 4: (0.1, 0)}[action]
        offsets = before[:, :2] - np.asarray(move, np.float32)  # the items' offsets after the move, before respawns
        dist2 = (offsets**2).sum(1)
        touched = dist2 < TOUCH_RADIUS**2
        expected = before[touched, 2].sum() + SCENT * (before[:, 2] * np.exp(-dist2 / SCENT_RANGE**2)).sum()
        if np.all(np.abs(obs["agent"]) < 0.95):  # away from the walls, where a move is clipped
            assert reward == pytest.approx(expected, abs=1e-5)
        assert not terminated and not truncated


@pytest.mark.slow
def test_the_set_encoder_learns_collect(tmp_path):
    """400k frames, serial: a random policy earns 0.7; the set encoder passed 7 by 300k frames (seed 1)."""
    result = run_sf(
        ["--env=collect", "--serial_mode=True", "--train_for_env_steps=400000", "--seed=1"]
        + [f"--train_dir={tmp_path}", "--experiment=collect"],
        module="sf_examples.custom_model.train_custom_model",
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    summary = json.loads((tmp_path / "collect" / "summary.json").read_text())
    print(f"collect after {summary['env_frames']['0']} frames: {summary['avg_episode_reward']['0']:.2f} per episode")
    assert summary["avg_episode_reward"]["0"] >= LEARNED_RETURN > RANDOM_RETURN, summary


@pytest.mark.slow
def test_the_breakdown_has_a_row_for_the_set_encoder(tmp_path):
    result = run_sf(
        ["breakdown", "--calibration_pairs=1", "--", "--env=collect", "--train_for_env_steps=8000", "--device=cpu"]
        + [f"--train_dir={tmp_path}", "--experiment=breakdown"],
        module="sf.profile",
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rows = json.loads((tmp_path / "breakdown" / "profiling" / "breakdown.json").read_text())["rows"]
    for row in (
        "Learner 0/train/calculate_losses/forward_head",
        "InferenceWorker_p0-w0/one_step/handle_policy_step/forward",
    ):
        encoder = rows[f"{row}/SetEncoder"]  # its own row, with torch's time for the encoder in it
        assert encoder["total_s"] > 0 and encoder["backend"] > 0 and encoder["events"]["ops"] > 0
