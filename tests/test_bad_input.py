"""Every bad input stops the real command line with one `sf: error:` line naming the flag, exit status 2, no
traceback, and nothing written anywhere (not even the train dir)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

# (extra flags, text the error line must contain); "{cwd}" and "{file}" are filled in per test, "-env" drops --env
CASES = [
    (["--experiment=../../somewhere"], "--experiment"),
    (["--experiment="], "--experiment"),
    (["--train_dir=/sys/sf_unwritable_train_dir"], "--train_dir"),
    (["--train_for_env_steps=-5"], "--train_for_env_steps"),
    (["--experiment={cwd}/absolute"], "--experiment"),
    (["--experiment=."], "--experiment"),
    (["--experiment=runs/../.."], "--experiment"),
    (["--train_dir="], "--train_dir"),
    (["--train_dir={file}/train_dir"], "--train_dir"),
    (["--train_for_env_steps=0"], "--train_for_env_steps"),
    (["--train_for_seconds=0"], "--train_for_seconds"),
    (["--num_workers=0"], "--num_workers"),
    (["--num_envs_per_worker=0"], "--num_envs_per_worker"),
    (["--num_envs_per_worker=3", "--worker_num_splits=2"], "--num_envs_per_worker"),
    (["--num_policies=0"], "--num_policies"),
    (["--policy_workers_per_policy=0"], "--policy_workers_per_policy"),
    (["--batch_size=0"], "--batch_size"),
    (["--batch_size=100", "--rollout=32"], "--batch_size"),
    (["--rollout=0"], "--rollout"),
    (["--use_rnn=True", "--rollout=32", "--recurrence=64"], "--recurrence"),
    (["--use_rnn=True", "--rollout=32", "--recurrence=12"], "--recurrence"),
    (["--num_epochs=0"], "--num_epochs"),
    (["--max_policy_lag=-1"], "--max_policy_lag"),
    (["--gamma=1.5"], "--gamma"),
    (["--learning_rate=0"], "--learning_rate"),
    (["--lr_adaptive_min=0.1", "--lr_adaptive_max=0.01"], "--lr_adaptive_max"),
    (["--save_every_sec=0"], "--save_every_sec"),
    (["--keep_checkpoints=0"], "--keep_checkpoints"),
    (["--stop_timeout_sec=0"], "--stop_timeout_sec"),
    (["--seed=-1"], "--seed"),
    (["--encoder_mlp_layers", "64", "0"], "--encoder_mlp_layers"),
    (["--env_frameskip=0"], "--env_frameskip"),
    (["--device=tpu"], "--device"),
    (["--restart_behavior=nope"], "--restart_behavior"),
    (["--use_rnn=maybe"], "--use_rnn"),
    (["--rollout=abc"], "--rollout"),
    (["--lerning_rate=1e-3"], "--lerning_rate"),
    (["--serial_mode=True", "--async_rl=True"], "--async_rl"),
    (["-env"], "--env"),
    (["--env=NoSuchEnv-v0"], "--env"),
    (["--env=Pendulum-v1", "--exploration_loss=symmetric_kl"], "--exploration_loss"),
    (["--cfg={cwd}/broken.yaml"], "--cfg"),
    (["--cfg={cwd}/unknown_key.yaml"], "lerning_rate"),
    (["--cfg=no_such_preset"], "--cfg"),
]


def _tree(root: Path) -> set[Path]:
    return {path.relative_to(root) for path in root.rglob("*")}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The command runs two folders deep, so a path that climbs out of the train dir still lands in tmp_path."""
    cwd = tmp_path / "outer" / "inner" / "cwd"
    cwd.mkdir(parents=True)
    (cwd / "a_file").write_text("not a folder\n")
    (cwd / "broken.yaml").write_text("num_workers: [1, 2\nbatch_size: 64\n")
    (cwd / "unknown_key.yaml").write_text("lerning_rate: 0.001\n")
    return cwd


@pytest.mark.parametrize("extra, names", CASES, ids=[" ".join(flags) for flags, _ in CASES])
def test_bad_input_is_one_line_naming_the_flag_and_writes_nothing(workspace: Path, extra: list[str], names: str):
    extra = [flag.format(cwd=workspace, file=workspace / "a_file") for flag in extra]
    base = ["--train_dir=train_dir", "--num_workers=1", "--train_for_seconds=60"]
    env_flag = [] if "-env" in extra else ["--env=CartPole-v1"]
    argv = [*env_flag, *base, *(flag for flag in extra if flag != "-env")]
    root = workspace.parents[1]
    before = _tree(root)
    result = subprocess.run(
        [sys.executable, "-m", "sf_examples.train_gym_env", *argv],
        cwd=workspace,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1, lines
    assert lines[0].startswith("sf: error: ") and names in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert _tree(root) == before  # nothing created, inside the train dir or outside it
