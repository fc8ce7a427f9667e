"""A short serial run as a user starts it: the files it leaves and the profile trees it prints."""

import json
import re

import pytest
from conftest import CARTPOLE_LAYOUT, read_scalars, run_sf

COMMON = [*CARTPOLE_LAYOUT, "--serial_mode=True", "--async_rl=False"]


def _read(exp_dir, name):
    return json.loads((exp_dir / name).read_text())


def test_serial_run_leaves_contract_files_and_prints_trees(tmp_path):
    result = run_sf([*COMMON, "--train_for_env_steps=3000", "--experiment=smoke", f"--train_dir={tmp_path}"])
    assert result.returncode == 0, result.stdout + result.stderr
    exp = tmp_path / "smoke"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert re.search(r"Collected \{0: \d+\}, FPS: [\d.]+$", lines[-1]), lines[-1]
    for name in ("Batcher 0", "InferenceWorker_p0-w0", "Learner 0", "RolloutWorker_w0", "RolloutWorker_w1", "Runner"):
        assert f"{name} profile tree view:" in result.stdout
    order = [
        result.stdout.index(f"{n} profile tree view:")
        for n in ("Batcher 0", "InferenceWorker_p0-w0", "Learner 0", "RolloutWorker_w0", "Runner")
    ]
    assert order == sorted(order)
    assert "main_loop:" in result.stdout and "env_step:" in result.stdout and "forward:" in result.stdout
    assert re.search(r"learner and inference on (cpu|cuda \(.+\))$", result.stdout, re.M)

    cfg = _read(exp, "config.json")
    assert cfg["env"] == "CartPole-v1" and cfg["serial_mode"] is True and cfg["recurrence"] == 1
    summary = _read(exp, "summary.json")
    assert summary["status"] == "ok" and summary["error"] is None
    # where it writes, said at the start; how it ended, said last before the Collected line
    assert f"experiment folder: {exp} (config, checkpoints, summary, profiles, TensorBoard events)" in result.stdout
    frames = summary["env_frames"]["0"]
    assert re.search(
        rf"Run finished: {frames:,} frames in \d+ s, avg episode reward {summary['avg_episode_reward']['0']:.2f}"
        rf" over the last \d+ episodes; outputs in {re.escape(str(exp))}$",
        lines[-2],
    ), lines[-2]
    assert summary["env_frames"]["0"] >= 3000
    assert summary["fps"] > 0 and summary["num_episodes"] > 0
    assert summary["avg_episode_reward"]["0"] > 0
    profile = _read(exp, "profile.json")
    assert {"Batcher 0", "InferenceWorker_p0-w0", "Learner 0", "RolloutWorker_w0", "Runner"} <= set(profile)
    assert "train" in profile["Learner 0"]["tree"] and profile["Runner"]["tree"]["main_loop"]["time"] > 0
    assert list((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert list((exp / ".summary" / "0").glob("events.out.tfevents.*"))


def test_resume_continues_frame_count(tmp_path):
    args = [*COMMON, "--experiment=resume", f"--train_dir={tmp_path}"]
    first = run_sf([*args, "--train_for_env_steps=2048"])
    assert first.returncode == 0, first.stderr
    first_summary = _read(tmp_path / "resume", "summary.json")
    second = run_sf([*args, "--train_for_env_steps=4096", "--restart_behavior=resume"])
    assert second.returncode == 0, second.stderr
    summary = _read(tmp_path / "resume", "summary.json")
    assert summary["env_frames"]["0"] >= 4096
    assert summary["policy_versions"]["0"] > first_summary["policy_versions"]["0"]
    assert "version" in second.stdout and f"({first_summary['env_frames']['0']} env frames)" in second.stdout
    checkpoints = sorted((tmp_path / "resume" / "checkpoint_p0").glob("checkpoint_*.pth"))
    newest_steps = int(checkpoints[-1].stem.split("_")[-1])
    assert newest_steps == summary["env_frames"]["0"]


def test_unknown_flag_fails_before_anything_starts(tmp_path):
    result = run_sf(["--env=CartPole-v1", "--rolout=32", f"--train_dir={tmp_path}", "--experiment=bad"], timeout=60)
    assert result.returncode == 2
    assert "--rolout" in result.stderr and "--rollout" in result.stderr
    assert not (tmp_path / "bad").exists()


def test_missing_env_is_a_clear_error(tmp_path):
    result = run_sf(
        ["--env=NoSuchEnv-v0", "--serial_mode=True", f"--train_dir={tmp_path}", "--experiment=noenv"], timeout=60
    )
    assert result.returncode != 0
    assert "NoSuchEnv-v0" in result.stdout + result.stderr


def test_kl_penalty_and_symmetric_kl_exploration_reach_the_loss(tmp_path):
    result = run_sf(
        [
            *COMMON,
            "--train_for_env_steps=3000",
            "--experiment=kl",
            f"--train_dir={tmp_path}",
            "--kl_loss_coeff=0.5",
            "--exploration_loss=symmetric_kl",
            "--num_epochs=2",
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    scalars = read_scalars(tmp_path / "kl")
    assert max(scalars["train/kl_loss"]) > 0
    assert all(v > 0 for v in scalars["train/exploration_loss"])  # a symmetric KL is positive; -entropy is not
    assert all(v > 0 for v in scalars["train/entropy"])


def test_symmetric_kl_on_continuous_actions_is_a_clear_error(tmp_path):
    result = run_sf(
        [
            "--env=Pendulum-v1",
            "--serial_mode=True",
            "--exploration_loss=symmetric_kl",
            f"--train_dir={tmp_path}",
            "--experiment=skl",
        ],
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("sf: error: --exploration_loss=symmetric_kl") and "continuous" in result.stderr
    assert not (tmp_path / "skl").exists()


@pytest.mark.slow
def test_cartpole_serial_learns():
    """The serial CartPole acceptance command: reward must reach 450 within 200k frames."""
    import tempfile

    with tempfile.TemporaryDirectory() as train_dir:
        result = run_sf(
            [
                "--env=CartPole-v1",
                "--serial_mode=True",
                "--async_rl=False",
                "--train_for_env_steps=200000",
                "--experiment=cp",
                "--seed=1",
                f"--train_dir={train_dir}",
            ],
            timeout=900,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        summary = json.loads(open(f"{train_dir}/cp/summary.json").read())
        assert summary["avg_episode_reward"]["0"] >= 450, summary
