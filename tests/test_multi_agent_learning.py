"""Multi-agent learning on 2 cores (slow): the two-agent cooperative game of `sf_examples.multi_agent` and
PettingZoo's MPE simple_spread through the adapter, each to a threshold random play does not come near.

Thresholds from runs of the same commands (docs/multi-agent.md): CooperativeCue with a resting agent went from 5
(random play: a quarter of the answers right) to 19 by 60k frames, accuracy 0.95; simple_spread with two agents
from -20.3 (random play, over 200 episodes; the mean of 100 varies by about 0.8) to about -15 by 300k frames.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_sf


def _summary(tmp_path, name: str) -> dict:
    return json.loads((tmp_path / name / "summary.json").read_text())


@pytest.mark.slow
def test_two_agents_learn_to_answer_one_cue_differently(tmp_path):
    result = run_sf(
        [
            "--env=cooperative_cue_resting",
            "--num_workers=2",
            "--seed=1",
            "--train_for_env_steps=100000",
            f"--train_dir={tmp_path}",
            "--experiment=cue",
        ],
        module="sf_examples.multi_agent.train_multi_agent",
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = _summary(tmp_path, "cue")
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 100000
    assert summary["episode_extra_stats"]["0"]["accuracy"] >= 0.9  # random play: 0.25
    assert summary["avg_episode_reward"]["0"] >= 17.0  # random play: 5, every answer right: 20


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_pettingzoo_simple_spread_learns(tmp_path):
    pytest.importorskip("mpe2")
    result = run_sf(
        [
            "--env=pettingzoo:mpe2.simple_spread_v3",
            '--pettingzoo_kwargs={"N": 2, "max_cycles": 25}',
            "--num_workers=2",
            "--num_envs_per_worker=8",
            "--use_rnn=False",
            "--encoder_mlp_layers",
            "64",
            "64",
            "--learning_rate=0.001",
            "--rollout=25",
            "--batch_size=1000",
            "--seed=1",
            "--train_for_env_steps=400000",
            f"--train_dir={tmp_path}",
            "--experiment=spread",
        ],
        module="sf_examples.pettingzoo.train_pettingzoo",
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = _summary(tmp_path, "spread")
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 400000
    assert summary["num_episodes"] * 25 >= 400000  # each agent's 25-step episodes count
    assert summary["avg_episode_reward"]["0"] >= -16.5  # random play: -20.3
