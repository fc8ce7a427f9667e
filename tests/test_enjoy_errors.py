"""A mistake on the evaluation command line is one `sf: error:` line and exit status 2, as in training: no such
experiment, a checkpoint of another env, no checkpoint of the kind asked for. The experiment is made here (its
config and an untrained policy's checkpoint), not trained."""

from __future__ import annotations

import pytest

from sf.enjoy import main, shape_mismatch
from sf.envs.families import family_named
from sf.experiment.checkpoint import CheckpointManager
from sf.experiment.config_file import write_config
from sf.experiment.folder import Experiment
from sf.runner.build import build_model, probe_env


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    """`cartpole`: a CartPole experiment with one checkpoint of a 64x64 policy."""
    train_dir = tmp_path_factory.mktemp("enjoy_errors")
    cfg = family_named("gym").parse_cfg(["--env=CartPole-v1", f"--train_dir={train_dir}", "--experiment=cartpole"])
    experiment = Experiment(cfg)
    write_config(experiment.dir, cfg)
    model = build_model(cfg, probe_env(cfg), "cpu")
    state = {"model": model.state_dict(), "optimizer": {}, "env_steps": 1024, "version": 1}
    CheckpointManager(experiment.dir, 0, 2).save(state, 1, 1024)
    return train_dir


def _enjoy(capsys, train_dir, *flags) -> tuple[int, list[str]]:
    code = main([f"--train_dir={train_dir}", "--max_num_episodes=1", *flags])
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.strip()]


def test_a_nonexistent_experiment_is_one_line(capsys, train_dir):
    code, lines = _enjoy(capsys, train_dir, "--env=CartPole-v1", "--experiment=no_such_run")
    assert code == 2
    assert lines == [
        f"sf: error: --experiment: no experiment at {train_dir / 'no_such_run'} (no config.json there); give the "
        "--train_dir and --experiment of a training run"
    ]


def test_a_checkpoint_of_another_env_names_both_envs_and_the_shapes(capsys, train_dir):
    code, lines = _enjoy(capsys, train_dir, "--env=Acrobot-v1", "--experiment=cartpole")
    assert code == 2 and len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("sf: error: --env: ")
    assert "trained on CartPole-v1" in line and "does not fit Acrobot-v1" in line
    # CartPole: 4 observations, 2 actions; Acrobot: 6 observations, 3 actions
    assert "[64, 4] saved, [64, 6] here" in line and "[2] saved, [3] here" in line
    assert line.endswith("evaluate it with --env=CartPole-v1")


def test_a_model_flag_that_changes_the_shapes_is_named(capsys, train_dir):
    code, lines = _enjoy(capsys, train_dir, "--env=CartPole-v1", "--experiment=cartpole", "--encoder_mlp_layers=32")
    assert code == 2 and len(lines) == 1, lines
    assert "does not fit the model built for CartPole-v1" in lines[0] and "--encoder_mlp_layers" in lines[0]


def test_no_best_checkpoint_is_one_line(capsys, train_dir):
    code, lines = _enjoy(capsys, train_dir, "--env=CartPole-v1", "--experiment=cartpole", "--load_checkpoint_kind=best")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("sf: error: --load_checkpoint_kind: no best checkpoint in ")


def test_the_right_env_plays(capsys, train_dir):
    assert main([f"--train_dir={train_dir}", "--env=CartPole-v1", "--experiment=cartpole", "--max_num_episodes=1"]) == 0


def test_shape_mismatch_lists_tensors_either_side_lacks():
    import torch

    saved = {"a": torch.zeros(2, 3), "b": torch.zeros(1)}
    here = {"a": torch.zeros(2, 4), "c": torch.zeros(5)}
    assert shape_mismatch(saved, here) == [
        "a: [2, 3] saved, [2, 4] here",
        "b: [1] saved, none here",
        "c: none saved, [5] here",
    ]


def test_a_video_on_a_headless_machine_prints_no_display_error(train_dir):
    """CartPole draws its frames with pygame: without a display SDL printed `error: XDG_RUNTIME_DIR is invalid or not
    set in the environment.` before every recording."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DISPLAY", "SDL_VIDEODRIVER")}
    flags = [f"--train_dir={train_dir}", "--experiment=cartpole", "--max_num_episodes=1", "--save_video"]
    command = [sys.executable, "-m", "sf.enjoy", "--env=CartPole-v1", *flags, "--video_name=headless.mp4"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "XDG_RUNTIME_DIR" not in result.stdout + result.stderr
    assert (train_dir / "cartpole" / "headless.mp4").stat().st_size > 0
