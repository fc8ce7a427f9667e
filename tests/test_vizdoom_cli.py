"""The VizDoom entry points as a user runs them: the profiling guide's benchmark command, and enjoy with a video."""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
from conftest import run_sf

pytest.importorskip("vizdoom")
imageio = pytest.importorskip("imageio.v2")

from sf.cfg.arguments import parse_full_cfg, resolve_device  # noqa: E402
from sf_examples.vizdoom.doom_env import TICRATE  # noqa: E402
from sf_examples.vizdoom.doom_envs import DOOM_SCENARIOS, add_doom_args, doom_defaults, register_doom_envs  # noqa: E402

TRAIN = "sf_examples.vizdoom.train_vizdoom"
ENJOY = "sf_examples.vizdoom.enjoy_vizdoom"

# Verbatim from Sample Factory's profiling guide (/work/shared/reference/000_3c51d1bfb0919e90.txt), including
# its repeated --policy_workers_per_policy.
REFERENCE_COMMAND = """python -m sf_examples.vizdoom.train_vizdoom --env=doom_benchmark --env_frameskip=4 \
--train_for_env_steps=4000000 --use_rnn=True --num_workers=12 --num_envs_per_worker=16 --num_policies=1 \
--num_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --experiment=profiling --benchmark=True \
--decorrelate_envs_on_one_worker=False --res_w=128 --res_h=72 --wide_aspect_ratio=True \
--policy_workers_per_policy=1 --worker_num_splits=2 --batched_sampling=False --serial_mode=False --async_rl=True \
--policy_workers_per_policy=1"""
REFERENCE_FLAGS = shlex.split(REFERENCE_COMMAND)[3:]
# Sized for a 2-core CI machine; given after the reference flags, so these values win.
SMALL = ["--train_for_env_steps=2048", "--num_workers=2", "--num_envs_per_worker=4", "--batch_size=256"]
COMPONENTS = ("Batcher 0", "InferenceWorker_p0-w0", "Learner 0", "RolloutWorker_w0", "RolloutWorker_w1", "Runner")


def _parse(argv: list[str], **kwargs):
    register_doom_envs()
    return parse_full_cfg(argv, add_args=add_doom_args, defaults=doom_defaults, **kwargs)


def test_reference_command_parses_flag_for_flag():
    assert shlex.split(REFERENCE_COMMAND)[:3] == ["python", "-m", TRAIN]
    cfg = _parse(REFERENCE_FLAGS)
    given = {flag[2:].split("=", 1)[0] for flag in REFERENCE_FLAGS}
    assert given == set(cfg.cli_args)  # every flag was recognised, none dropped
    assert cfg.env == "doom_benchmark" and cfg.experiment == "profiling"
    assert (cfg.num_workers, cfg.num_envs_per_worker, cfg.batch_size) == (12, 16, 2048)
    assert cfg.train_for_env_steps == 4_000_000 and cfg.rollout == cfg.recurrence == 32
    assert cfg.wide_aspect_ratio is True and (cfg.res_w, cfg.res_h) == (128, 72)
    assert cfg.benchmark is True and cfg.async_rl is True and cfg.serial_mode is False
    assert cfg.batched_sampling is False and cfg.decorrelate_envs_on_one_worker is False

    later = _parse([*REFERENCE_FLAGS, *SMALL])
    assert (later.num_workers, later.num_envs_per_worker, later.batch_size) == (2, 4, 256)
    assert later.train_for_env_steps == 2048


def test_reference_command_runs_to_the_end_and_prints_every_profile(tmp_path):
    result = run_sf([*REFERENCE_FLAGS, *SMALL, f"--train_dir={tmp_path}"], module=TRAIN, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    collected = re.search(r"Collected \{0: (\d+)\}, FPS: ([\d.]+)$", lines[-1])
    assert collected, lines[-1]
    assert int(collected.group(1)) >= 2048 and float(collected.group(2)) > 0
    positions = [result.stdout.find(f"{name} profile tree view:") for name in COMPONENTS]
    assert -1 not in positions and positions == sorted(positions), dict(zip(COMPONENTS, positions))
    for hotspot in ("env_step:", "forward:", "train:", "batching:", "main_loop:"):
        assert hotspot in result.stdout

    exp = tmp_path / "profiling"
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] == int(collected.group(1))
    config = json.loads((exp / "config.json").read_text())
    assert config["env"] == "doom_benchmark" and config["wide_aspect_ratio"] is True and config["num_workers"] == 2


@pytest.mark.slow
def test_enjoy_plays_an_episode_and_writes_a_video(tmp_path):
    """Trained at frameskip 5 (enjoy reads it from config.json): the video runs at 35 / 5 = 7 fps, game speed."""
    frameskip = 5
    train = run_sf(
        [
            "--env=doom_basic",
            f"--env_frameskip={frameskip}",
            "--serial_mode=True",
            "--num_workers=1",
            "--num_envs_per_worker=2",
            "--rollout=16",
            "--batch_size=64",
            "--train_for_env_steps=256",
            "--seed=1",
            "--experiment=enjoy",
            f"--train_dir={tmp_path}",
        ],
        module=TRAIN,
        timeout=120,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert list((tmp_path / "enjoy" / "checkpoint_p0").glob("checkpoint_*.pth"))

    video = tmp_path / "enjoy" / "replay.mp4"
    assert not video.exists()
    enjoy = run_sf(
        [
            "--env=doom_basic",
            "--experiment=enjoy",
            f"--train_dir={tmp_path}",
            "--save_video",
            "--max_num_episodes=1",
            "--seed=3",
        ],
        module=ENJOY,
        timeout=120,
    )
    output = enjoy.stdout + enjoy.stderr
    assert enjoy.returncode == 0, output[-3000:]
    assert re.search(r"Avg episode reward: -?[\d.]+ over 1 episodes", output), output[-3000:]
    assert video.is_file() and video.stat().st_size > 1000
    with video.open("rb") as f:
        assert f.read(12)[4:8] == b"ftyp"  # an MP4 container, not an empty or partial file
    reader = imageio.get_reader(video)
    try:
        assert reader.get_meta_data()["fps"] == pytest.approx(TICRATE / frameskip)
        max_steps = -(-DOOM_SCENARIOS["doom_basic"].timeout_tics // frameskip)
        assert 1 <= reader.count_frames() <= max_steps  # one frame per agent step of the single episode
        assert reader.get_data(0).shape == (120, 160, 3)  # the rendered screen, not the 128x72 observation
    finally:
        reader.close()


def test_enjoy_without_an_experiment_fails_clearly(tmp_path):
    result = run_sf(["--env=doom_basic", "--experiment=missing", f"--train_dir={tmp_path}"], module=ENJOY, timeout=60)
    assert result.returncode == 2
    assert (
        result.stderr.strip().startswith("sf: error: --experiment: no experiment at")
        and "no config.json" in result.stderr
    )


def test_defaults_follow_the_machine():
    import torch

    cfg = _parse(["--env=doom_basic"])
    assert cfg.num_workers == (os.cpu_count() or 1)
    assert resolve_device(cfg) == ("cuda" if torch.cuda.is_available() else "cpu")
