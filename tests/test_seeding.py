"""Without --seed every process of a run draws its own random numbers: forked from one server, they would otherwise
all start from its generator's state and explore alike."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

TESTS = Path(__file__).parent


@pytest.mark.parametrize(
    "placement", ["rollout_worker", pytest.param("own_process", marks=pytest.mark.slow)]
)  # the seeding is the same for every kind of process: the default suite runs the default placement
def test_two_workers_first_actions_differ_when_no_seed_is_given(tmp_path, placement):
    result = subprocess.run(
        [
            sys.executable,
            str(TESTS / "action_log_env.py"),
            "--env=same_every_step",
            "--num_workers=2",
            "--num_envs_per_worker=1",
            "--worker_num_splits=1",
            "--rollout=16",
            "--batch_size=32",
            "--use_rnn=False",
            f"--inference_placement={placement}",
            "--policy_workers_per_policy=2",
            "--train_for_env_steps=400",
            f"--train_dir={tmp_path}",
            "--experiment=noseed",
        ],  # fmt: skip
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    first = [(tmp_path / f"actions_w{w}.txt").read_text().split()[:48] for w in (0, 1)]
    assert len(first[0]) == len(first[1]) == 48
    assert first[0] != first[1]  # the same 48 draws from 8 actions by chance: 8^-48
