"""Best-policy checkpoints (--save_best_*, --load_checkpoint_kind=best) and Weights & Biases logging (--with_wandb)."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, read_scalars, run_sf

from sf.experiment.checkpoint import CheckpointManager


def _state(version: int) -> dict:
    return {"version": version, "env_steps": version * 100, "model": {}, "optimizer": {}}


def test_a_best_checkpoint_needs_to_beat_the_last_by_more_than_a_thousandth(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=2)
    assert manager.save_if_best(_state(1), 1, 100, "reward", 10.0) is not None
    assert manager.save_if_best(_state(2), 2, 200, "reward", 10.0005) is None
    assert manager.save_if_best(_state(3), 3, 300, "reward", 9.0) is None
    path = manager.save_if_best(_state(4), 4, 400, "reward", 12.5)
    assert [p.name for p in manager.paths("best")] == [path.name] == ["best_000000004_400_reward_12.500.pth"]
    assert manager.load("best") == {**_state(4), "best_performance": 12.5}
    assert manager.paths("latest") == []  # best checkpoints are not part of the periodic rotation


# --- one short serial run that keeps best checkpoints and logs to W&B offline -------------------------

SERIAL = [
    "--env=CartPole-v1",
    "--serial_mode=True",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--use_rnn=False",
    "--seed=1",
    "--save_every_sec=3600",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("wandb")
    train_dir = tmp_path_factory.mktemp("best")
    home = tmp_path_factory.mktemp("home")  # W&B's own caches and settings stay out of the user's home
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        WANDB_MODE="offline",
        WANDB_CONFIG_DIR=str(home),
        WANDB_CACHE_DIR=str(home),
        WANDB_DATA_DIR=str(home),
        WANDB_SILENT="true",
    )
    # best checks come once a second of wall time: at 15k frames/s, 100k frames leave several of them after 2,000
    flags = [
        *SERIAL,
        "--train_for_env_steps=100000",
        "--save_best_after=2000",
        "--save_best_every_sec=1",
        "--with_wandb",
        "--wandb_project=sf_tests",
        "--wandb_tags",
        "a",
        "b",
        f"--train_dir={train_dir}",
        "--experiment=best",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "sf_examples.train_gym_env", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return train_dir / "best", result.stdout + result.stderr


def test_the_best_policy_is_kept_with_its_score(run):
    exp, out = run
    best = list((exp / "checkpoint_p0").glob("best_*.pth"))
    assert len(best) == 1, out[-3000:]
    version, frames, value = re.fullmatch(r"best_(\d+)_(\d+)_reward_(-?[\d.]+)\.pth", best[0].name).groups()
    assert int(frames) >= 2000  # none before --save_best_after
    import torch

    state = torch.load(best[0], weights_only=False)
    assert (state["version"], state["env_steps"]) == (int(version), int(frames))
    assert round(state["best_performance"], 3) == float(value)
    latest = torch.load(sorted((exp / "checkpoint_p0").glob("checkpoint_*.pth"))[-1], weights_only=False)
    assert latest["best_performance"] == state["best_performance"]  # a resume knows the score to beat
    logged = [float(v) for v in re.findall(r"new best policy, reward=(-?[\d.]+)", out)]
    assert logged and logged == sorted(logged) and logged[-1] == float(value)


def test_enjoy_loads_the_best_checkpoint_when_asked(run):
    exp, _ = run
    best = int(next((exp / "checkpoint_p0").glob("best_*.pth")).name.split("_")[1])
    latest = int(sorted((exp / "checkpoint_p0").glob("checkpoint_*.pth"))[-1].name.split("_")[1])
    assert best < latest  # the final checkpoint comes after the last check for a new best
    result = run_sf(
        [
            "--env=CartPole-v1",
            f"--train_dir={exp.parent}",
            "--experiment=best",
            "--max_num_episodes=1",
            "--load_checkpoint_kind=best",
        ],
        module="sf_examples.enjoy_gym_env",
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"loaded policy version {best} " in result.stdout + result.stderr


def _wandb_records(path: Path):
    """The records of a W&B run file: a 7-byte header, then LevelDB-style log records in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2

    data, at, pending = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while at + 7 <= len(data):
        if 32768 - at % 32768 < 7:  # a block's tail too short for a record header is padding
            at += 32768 - at % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[at : at + 7])
        pending += data[at + 7 : at + 7 + length]
        at += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_run_holds_the_tensorboard_scalars_and_the_config(run):
    exp, _ = run
    config = json.loads((exp / "config.json").read_text())
    run_dirs = list((exp / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == 1 and run_dirs[0].name.endswith(config["wandb_unique_id"])
    history: dict[str, list[float]] = {}
    run_record = None
    for record in _wandb_records(next(run_dirs[0].glob("run-*.wandb"))):
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for key, value in items.items():
                history.setdefault(key, []).append(value)
        elif record.WhichOneof("record_type") == "run":
            run_record = record.run
    assert (run_record.project, run_record.run_group, run_record.job_type) == ("sf_tests", "CartPole-v1", "SF")
    assert list(run_record.tags) == ["a", "b"]
    logged_config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    assert logged_config["learning_rate"] == config["learning_rate"]
    tensorboard = read_scalars(exp)
    for key in ("train/total_loss", "train/lr", "reward/avg_episode_reward"):
        assert history[key] == pytest.approx(tensorboard[key], rel=1e-6), key
    assert history["env_frames"] == sorted(history["env_frames"]) and max(history["env_frames"]) >= 8000


def test_wandb_without_a_login_stops_with_one_line(tmp_path):
    pytest.importorskip("wandb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        PYTHONUNBUFFERED="1",
        WANDB_CONFIG_DIR=str(tmp_path),
        WANDB_CACHE_DIR=str(tmp_path),
        WANDB_DATA_DIR=str(tmp_path),
        WANDB_API_KEY="",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sf_examples.train_gym_env",
            *SERIAL,
            "--with_wandb",
            f"--train_dir={tmp_path / 'td'}",
            "--train_for_env_steps=1000",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("sf: error:")]
    assert len(errors) == 1 and "--with_wandb" in errors[0] and "WANDB_MODE=offline" in errors[0]
    assert "Traceback" not in result.stderr and not list((tmp_path / "td").rglob("*.pth"))
