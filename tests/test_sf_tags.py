"""Sample Factory's TensorBoard names beside sf's: computed from episodes by hand, and in the event files of a run."""

from __future__ import annotations

import pytest
from conftest import LAYOUT, read_scalars, run_sf

from sf.runner.stats import Progress
from sf.runner.tb_tags import episode_scalars, train_scalars


def test_episode_scalars_carry_sample_factory_tags_with_min_and_max():
    progress = Progress(num_policies=2, stats_avg=3, start_time=0.0)
    assert episode_scalars(progress, 0) == {}  # no episode yet: nothing written, as Sample Factory
    progress.on_episodes(0, [(1.0, 10, None, None), (2.0, 20, 5.0, {"hits": 2.0}), (6.0, 30, 7.0, {"a/b": 1.0})])
    scalars = episode_scalars(progress, 0)
    assert scalars["reward/reward"] == pytest.approx(3.0)
    assert (scalars["reward/reward_min"], scalars["reward/reward_max"]) == (1.0, 6.0)
    assert (scalars["len/len"], scalars["len/len_min"], scalars["len/len_max"]) == (20.0, 10, 30)
    assert scalars["reward/avg_episode_reward"] == 3.0 and scalars["len/avg_episode_length"] == 20.0
    objectives = [1.0, 5.0, 7.0]  # an episode without its own objective counts its return
    assert scalars["policy_stats/avg_true_objective"] == pytest.approx(sum(objectives) / 3)
    assert scalars["policy_stats/avg_true_objective_min"] == 1.0
    assert scalars["policy_stats/avg_true_objective_max"] == 7.0
    assert scalars["policy_stats/avg_hits"] == 2.0 and scalars["a/b"] == 1.0
    assert episode_scalars(progress, 1) == {}


def test_train_scalars_add_sample_factory_names_of_the_same_values():
    means = {"total_loss": 1.5, "clip_fraction": 0.1, "policy_lag": 0.4, "policy_lag_max": 2.0, "lr": 3.0}
    scalars = train_scalars(means)
    assert scalars == {
        "train/total_loss": 1.5,
        "train/loss": 1.5,
        "train/clip_fraction": 0.1,
        "train/fraction_clipped": 0.1,
        "train/policy_lag": 0.4,
        "train/version_diff_avg": 0.4,
        "train/policy_lag_max": 2.0,
        "train/version_diff_max": 2.0,
        "train/lr": 3.0,
    }


def test_a_run_writes_sample_factory_tags_a_dashboard_reads(tmp_path):
    args = [*LAYOUT, "--env=CartPole-v1", "--serial_mode=True", "--train_for_env_steps=6000"]
    result = run_sf([*args, f"--train_dir={tmp_path}", "--experiment=tags"], timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    scalars = read_scalars(tmp_path / "tags", policy=0)
    for tag in ("reward/reward", "reward/reward_min", "reward/reward_max", "len/len", "len/len_min", "len/len_max"):
        assert tag in scalars, sorted(scalars)
    assert [round(v, 3) for v in scalars["reward/reward"]] == pytest.approx(scalars["reward/avg_episode_reward"])
    assert all(lo <= hi for lo, hi in zip(scalars["reward/reward_min"], scalars["reward/reward_max"]))
    assert scalars["train/loss"] == pytest.approx(scalars["train/total_loss"])
    assert scalars["train/version_diff_avg"] == pytest.approx(scalars["train/policy_lag"])
    assert scalars["perf/_fps"] == pytest.approx(scalars["perf/fps"])
    assert min(scalars["stats/master_process_memory_mb"]) > 10
