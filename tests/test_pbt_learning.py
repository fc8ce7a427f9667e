"""Populations that learn (slow, 2 cores): population-based training rescues policies that start with a learning
rate too small to learn CartPole, where the same population without its steps keeps them at random play; and in
self-play on CueDuel every policy of the population gets better playing against the others.

Numbers from runs of the same commands (docs/populations.md): with PBT all four CartPole policies averaged 500 by
140k frames each, the two with a learning rate of 1e-7 replaced at 60k and 90k; without PBT steps those two stayed
near 20. On CueDuel each policy's share of right answers went from about 0.25 to 0.99 in 100k frames each.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import read_scalars, run_sf

CARTPOLE_THRESHOLD = 475.0  # gymnasium's reward_threshold for CartPole-v1
TOO_SMALL_LR = 1e-7


def cartpole_population(tmp_path, name: str, *flags: str):
    """Four CartPole policies, 2 and 3 starting with a learning rate that learns nothing (their files, as a user
    would write them before the first start)."""
    exp = tmp_path / name
    exp.mkdir()
    for p in (2, 3):
        (exp / f"policy_{p:02d}_cfg.json").write_text(json.dumps({"learning_rate": TOO_SMALL_LR}))
    result = run_sf(
        [
            "--env=CartPole-v1",
            "--serial_mode=True",
            "--num_policies=4",
            "--with_pbt=True",
            "--pbt_period_env_steps=30000",
            "--seed=1",
            "--train_for_env_steps=200000",
            f"--train_dir={tmp_path}",
            f"--experiment={name}",
            *flags,
        ],
        timeout=900,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return json.loads((exp / "summary.json").read_text()), result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_pbt_brings_policies_with_a_useless_learning_rate_to_the_threshold(tmp_path):
    summary, log = cartpole_population(tmp_path, "pbt", "--pbt_start_mutation=60000")
    rewards = summary["avg_episode_reward"]
    assert all(rewards[p] >= CARTPOLE_THRESHOLD for p in "0123"), rewards
    replaced = {int(p) for p in re.findall(r"PBT: policy (\d) \(true_objective [\d.]+\) takes policy", log)}
    assert {2, 3} <= replaced
    policies = summary["population"]["policies"]
    assert all(policies[p]["hyperparameters"]["learning_rate"] > 1e-5 for p in "23")  # a learning rate that learns

    without, _ = cartpole_population(tmp_path, "no_steps", "--pbt_start_mutation=1000000000")
    rewards = without["avg_episode_reward"]
    assert all(rewards[p] >= CARTPOLE_THRESHOLD for p in "01") and all(rewards[p] < 100 for p in "23"), rewards
    assert all(not entry["replacements"] for entry in without["population"]["policies"].values())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_policy_of_a_self_play_population_gets_better_against_the_others(tmp_path):
    result = run_sf(
        [
            "--env=cue_duel",
            "--num_policies=4",
            "--with_pbt=True",
            "--pbt_start_mutation=20000",
            "--pbt_period_env_steps=20000",
            "--num_workers=2",
            "--seed=1",
            "--train_for_env_steps=100000",
            f"--train_dir={tmp_path}",
            "--experiment=duel",
        ],
        module="sf_examples.multi_agent.train_multi_agent",
        timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    summary = json.loads((tmp_path / "duel" / "summary.json").read_text())
    assert summary["status"] == "ok" and all(summary["env_frames"][p] >= 100000 for p in "0123")
    # where play starts: a policy that ignores the cue is right 1 time in 4, whoever the opponent (measured here, as
    # the run learns faster than its first 5 s report)
    assert 0.2 < random_play_right_share() < 0.3
    for p in range(4):
        right = read_scalars(tmp_path / "duel", p)["policy_stats/avg_true_objective"]
        assert right[-1] >= 0.9, (p, right)
        assert summary["episode_extra_stats"][str(p)]["lost"] < 0.5  # of 16 steps, at most a loss in every other


def random_play_right_share(episodes: int = 200) -> float:
    """CueDuel's true objective (the share of steps a seat was right) under uniformly random actions."""
    from sf_examples.multi_agent.cue_duel import CueDuel

    env, rng, shares = CueDuel(), np.random.default_rng(0), []
    env.reset(seed=0)
    while len(shares) < episodes:
        _, _, terminated, _, infos = env.step(rng.integers(env.cues, size=2))
        if terminated[0]:
            shares += [info["true_objective"] for info in infos]
    return float(np.mean(shares))
