"""A resumed run knows what it resumes: a config that changes what the checkpoints hold is refused, a finished run
says so and writes nothing, other changes are logged with the old config kept, `restart` starts over, and every
rollout worker acts with the resumed weights from its first step."""

from __future__ import annotations

import json
import re
import resource
import time
from pathlib import Path

import pytest
import torch
from conftest import run_sf

from sf.cfg.arguments import cfg_to_dict, parse_full_cfg
from sf.envs.gym_family import register_gym_env
from sf.experiment.checkpoint import CheckpointManager
from sf.experiment.folder import Experiment
from sf.runner.build import build_model, probe_env
from sf.train import run_rl
from sf_examples.train_gym_env import gym_defaults

LAYOUT = ["--env=CartPole-v1", "--encoder_mlp_layers", "32", "32", "--num_workers=2", "--num_envs_per_worker=4",
          "--batch_size=256", "--rollout=32", "--seed=1", "--save_every_sec=3600"]  # fmt: skip


def _cfg(tmp_path: Path, *extra: str):
    register_gym_env("CartPole-v1")
    return parse_full_cfg([*LAYOUT, f"--train_dir={tmp_path}", "--experiment=exp", *extra], defaults=gym_defaults)


def _prior_run(tmp_path: Path, *extra: str, env_steps: int = 4096, version: int = 16) -> Path:
    """The folder a run with LAYOUT (and `extra`) leaves: its config, one checkpoint, its summary and profile."""
    cfg = _cfg(tmp_path, *extra)
    model = build_model(cfg, probe_env(cfg), "cpu")
    state = {
        "model": model.state_dict(),
        "optimizer": torch.optim.Adam(model.parameters()).state_dict(),
        "env_steps": env_steps,
        "version": version,
        "lr": cfg.learning_rate,
    }
    folder = tmp_path / "exp"
    CheckpointManager(folder, 0, keep=2).save(state, version, env_steps)
    (folder / "config.json").write_text(json.dumps(cfg_to_dict(cfg)))
    (folder / "summary.json").write_text(json.dumps({"status": "ok", "env_frames": {"0": env_steps}, "fps": 1.0}))
    (folder / "profile.json").write_text(json.dumps({"Runner": {"name": "Runner", "pid": 1, "tree": {}}}))
    return folder


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


def test_a_resume_that_changes_the_model_is_refused_with_every_difference_and_writes_nothing(tmp_path, capsys):
    folder = _prior_run(tmp_path)
    before = _snapshot(folder)
    cfg = _cfg(tmp_path, "--encoder_mlp_layers", "64", "64", "--nonlinearity=relu", "--learning_rate=0.0005")
    assert run_rl(cfg) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sf: error: --restart_behavior=resume:")
    assert "--encoder_mlp_layers: 32 32 -> 64 64" in err[0] and "--nonlinearity: tanh -> relu" in err[0]
    assert "learning_rate" not in err[0]  # allowed: only what the checkpoints hold is listed
    assert _snapshot(folder) == before


def test_a_resume_whose_saved_config_cannot_be_read_is_refused_and_writes_nothing(tmp_path, capsys):
    folder = _prior_run(tmp_path)
    (folder / "config.json").write_text('{"env": "CartPole-v1", "enc')  # cut short
    before = _snapshot(folder)
    assert run_rl(_cfg(tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sf: error: --restart_behavior=resume:") and "config.json" in err[0]
    assert _snapshot(folder) == before


def test_a_finished_experiment_says_so_and_overwrites_nothing(tmp_path, sf_log):
    folder = _prior_run(tmp_path, env_steps=5000)
    before = _snapshot(folder)
    assert run_rl(_cfg(tmp_path, "--train_for_env_steps=5000")) == 0
    assert any("already finished" in line and "5000" in line for line in sf_log)
    assert _snapshot(folder) == before


def test_restart_starts_checkpoints_tensorboard_profiling_and_the_profile_feeds_afresh(tmp_path):
    folder = _prior_run(tmp_path)
    events = folder / ".summary" / "0" / "events.out.tfevents.1"
    events.parent.mkdir(parents=True)
    events.write_bytes(b"old curves")
    for name in ("profile_series.jsonl", "profile_live.jsonl", "profile_live.jsonl.1"):
        (folder / name).write_text("{}\n")
    (folder / "profiling" / "timeline_parts").mkdir(parents=True)
    (folder / "profiling" / "timeline_parts" / "Learner_0.1.json").write_text("{}")
    Experiment(_cfg(tmp_path, "--restart_behavior=restart")).close()
    assert not (folder / "checkpoint_p0").exists() and not events.exists()
    assert not (folder / "profiling").exists()  # an earlier run's profiler outputs
    assert not any(
        (folder / name).exists() for name in ("profile_series.jsonl", "profile_live.jsonl", "profile_live.jsonl.1")
    )


def test_other_changes_are_logged_and_the_previous_config_is_kept(tmp_path):
    folder = _prior_run(tmp_path, "--serial_mode=True", env_steps=4096, version=16)
    old_config = (folder / "config.json").read_text()
    result = run_sf(
        [*LAYOUT, "--serial_mode=True", "--learning_rate=0.0005", "--train_for_env_steps=4097",
         f"--train_dir={tmp_path}", "--experiment=exp"],
        timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert "resuming with a changed config (--learning_rate: 0.001 -> 0.0005; --train_for_env_steps:" in result.stdout
    assert "Learner 0 resumed from policy version 16 (4096 env frames)" in result.stdout
    kept = list(folder.glob("config.*.json"))
    assert len(kept) == 1 and kept[0].read_text() == old_config
    assert json.loads((folder / "config.json").read_text())["learning_rate"] == 0.0005


def test_a_resume_past_a_damaged_newest_sets_it_aside_and_its_own_saves_are_the_newest(tmp_path):
    folder = _prior_run(tmp_path, "--serial_mode=True", env_steps=4096, version=16)
    damaged = folder / "checkpoint_p0" / "checkpoint_000000020_5120.pth"
    damaged.write_bytes(b"cut short")
    result = run_sf(
        [*LAYOUT, "--serial_mode=True", "--train_for_env_steps=4200", f"--train_dir={tmp_path}", "--experiment=exp"],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Learner 0 resumed from policy version 16 (4096 env frames)" in result.stdout
    assert "the 1 newer checkpoint(s) of policy 0 moved to" in result.stdout
    assert (folder / "checkpoint_p0" / "superseded" / damaged.name).read_bytes() == b"cut short"
    newest = CheckpointManager(folder, 0, keep=2).newest()
    assert newest.state["version"] > 16 and newest.path.name != damaged.name


def test_every_rollout_worker_acts_with_the_resumed_weights_from_its_first_step(tmp_path):
    """Resumed at version 1000: a trajectory collected with the initial weights (version 0) before the learner
    loaded the checkpoint would show a policy lag near 1000. Synchronous mode trains on every trajectory, so the
    largest lag of the run is that of the very first ones."""
    _prior_run(tmp_path, "--async_rl=False", env_steps=4096, version=1000)
    result = run_sf(
        [*LAYOUT, "--async_rl=False", "--train_for_env_steps=6144", f"--train_dir={tmp_path}", "--experiment=exp"],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    summary = json.loads((tmp_path / "exp" / "summary.json").read_text())
    assert summary["policy_versions"]["0"] > 1000
    assert summary["max_policy_lag"]["0"] <= 1, summary["max_policy_lag"]


@pytest.mark.slow
def test_the_first_episodes_after_a_resume_score_like_the_trained_policy(tmp_path):
    """Train CartPole until it balances, resume: the episodes the resumed run reports first score like the trained
    policy (a random one scores about 22)."""
    train = [*LAYOUT, "--encoder_mlp_layers", "64", "64", f"--train_dir={tmp_path}", "--experiment=exp"]
    result = run_sf([*train, "--train_for_env_steps=300000"], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    trained = json.loads((tmp_path / "exp" / "summary.json").read_text())["avg_episode_reward"]["0"]
    assert trained > 150, trained
    started = time.monotonic()
    result = run_sf([*train, "--train_for_env_steps=320000"], timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    first = [float(m) for m in re.findall(r"Avg episode reward: \[\(0, '([\d.]+)'\)\]", result.stdout)]
    assert first and first[0] > 0.5 * trained, (first, trained, time.monotonic() - started)


def test_a_full_disk_ends_a_serial_run_naming_the_file_and_keeps_the_previous_checkpoint(tmp_path):
    """The checkpoint (a 512x512 encoder and its Adam state: about 3 MB) no longer fits under RLIMIT_FSIZE; the
    run's other files (config, summary, profile, TensorBoard) do."""
    layout = ["--serial_mode=True", "--encoder_mlp_layers", "512", "512", "--log_to_file=False"]
    folder = _prior_run(tmp_path, *layout, env_steps=4096, version=16)
    previous = folder / "checkpoint_p0" / "checkpoint_000000016_4096.pth"
    before = previous.read_bytes()
    limit = 1024 * 1024
    result = run_sf(
        [*LAYOUT, *layout, "--save_every_sec=1", "--train_for_env_steps=100000000", f"--train_dir={tmp_path}",
         "--experiment=exp"],
        timeout=240,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:]
    error = json.loads((folder / "summary.json").read_text())["error"]
    assert re.fullmatch(
        r"Learner 0: CheckpointError: cannot save checkpoint \S+/exp/checkpoint_p0/checkpoint_\d+_\d+\.pth: "
        r"File too large \(errno 27\)",
        error,
    ), error
    assert result.stdout.strip().splitlines()[-1].endswith(f"run ended with an error: {error}")
    assert [p.name for p in CheckpointManager(folder, 0, keep=2).paths()] == [previous.name]
    assert previous.read_bytes() == before and not list(previous.parent.glob("*.tmp"))


def test_a_parallel_run_whose_buffers_exceed_the_file_size_limit_ends_in_one_line_and_leaves_no_shm_file(tmp_path):
    """RLIMIT_FSIZE covers /dev/shm too: the shared trajectory buffers cannot be sized, before any process starts.
    torch keeps the file it could not size; the run removes it, and says what failed in summary.json and one line."""
    folder = _prior_run(tmp_path)
    shm_before = set(Path("/dev/shm").iterdir())
    limit = 16 * 1024
    result = run_sf(
        [*LAYOUT, "--log_to_file=False", "--train_for_env_steps=100000000", f"--train_dir={tmp_path}",
         "--experiment=exp"],
        timeout=240,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "error" and "File too large" in summary["error"], summary
    assert result.stdout.strip().splitlines()[-1].endswith(f"run ended with an error: {summary['error']}")
    pid = re.search(r"\]\[(\d+)\]", result.stdout).group(1)  # the main process's, in each log line
    assert not [p for p in set(Path("/dev/shm").iterdir()) - shm_before if p.name.startswith(f"torch_{pid}_")]
    assert [p.name for p in CheckpointManager(folder, 0, keep=2).paths()] == ["checkpoint_000000016_4096.pth"]
