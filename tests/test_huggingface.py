"""The Hub round trip without a network: enjoy's `--push_to_hub` stages the model card (env, score over the played
episodes, the command), config, newest checkpoint and replay, and uploads exactly that folder (the upload calls are
replaced at huggingface_hub's API boundary by a copy to a local folder); `load_from_hub` installs the snapshot into
train_dir, where enjoy plays it; with the Hub unreachable a push or a load is one error line, status 1, and nothing
lost."""

from __future__ import annotations

import filecmp
import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, write_experiment

from sf.cfg.arguments import parse_full_cfg
from sf.enjoy import enjoy
from sf.envs import EnvAdapter, EnvConfig, create_env
from sf.envs.gym_family import register_gym_env
from sf.envs.spaces import EnvInfo
from sf.huggingface import load_from_hub
from sf.huggingface.hub import STAGING
from sf.runner.build import build_model

huggingface_hub = pytest.importorskip("huggingface_hub")
hub_constants = pytest.importorskip("huggingface_hub.constants")  # a submodule the package imports lazily
REPO = "someone/cartpole-sf"
TRAIN = ["--env=CartPole-v1", "--use_rnn=False", "--encoder_mlp_layers", "16", "--seed=1"]


@pytest.fixture
def experiment(tmp_path) -> Path:
    register_gym_env("CartPole-v1")
    cfg = parse_full_cfg([*TRAIN, f"--train_dir={tmp_path}", "--experiment=cartpole"])
    env = EnvAdapter(create_env(cfg.env, cfg, EnvConfig()), 1)
    info = EnvInfo(env.obs_spec, env.action_spec, 1.0, 1)
    env.close()
    write_experiment(tmp_path / "cartpole", cfg, build_model(cfg, info, "cpu"), version=7, env_steps=896)
    return tmp_path / "cartpole"


@pytest.fixture
def hub(tmp_path, monkeypatch) -> types.SimpleNamespace:
    """The Hub as a local folder: create_repo records the repository, upload_folder copies what it is given."""
    remote = tmp_path / "remote"
    calls = []

    def create_repo(self, repo_id, exist_ok=False, **kwargs):
        calls.append(("create_repo", repo_id))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, path_in_repo=None, delete_patterns=None, **kwargs):
        calls.append(("upload_folder", repo_id, folder_path, path_in_repo))
        shutil.copytree(folder_path, remote / repo_id)

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(remote / repo_id))
    return types.SimpleNamespace(remote=remote, calls=calls)


def _enjoy(exp: Path, *flags: str) -> int:
    argv = ["--env=CartPole-v1", f"--train_dir={exp.parent}", f"--experiment={exp.name}", *flags]
    status, _ = enjoy(parse_full_cfg(argv, evaluation=True))
    return status


def test_push_stages_card_config_checkpoint_and_replay_and_uploads_that_folder(experiment, hub, sf_log):
    assert (
        _enjoy(experiment, "--max_num_episodes=3", "--save_video=True", "--push_to_hub", f"--hf_repository={REPO}") == 0
    )
    staged = experiment / STAGING
    assert hub.calls == [("create_repo", REPO), ("upload_folder", REPO, str(staged), ".")]
    files = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    checkpoint = next((experiment / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert files == ["README.md", "checkpoint_p0/" + checkpoint.name, "config.json", "replay.mp4"]
    assert filecmp.cmp(staged / "config.json", experiment / "config.json", shallow=False)
    assert filecmp.cmp(staged / "checkpoint_p0" / checkpoint.name, checkpoint, shallow=False)
    assert filecmp.cmp(staged / "replay.mp4", experiment / "replay.mp4", shallow=False)
    assert (
        not filecmp.dircmp(staged, hub.remote / REPO).diff_files
        and sorted(str(p.relative_to(hub.remote / REPO)) for p in (hub.remote / REPO).rglob("*") if p.is_file())
        == files
    )  # what was staged is what went up

    returns = [float(r) for r in re.findall(r"episode \d+: reward ([\d.]+)", "\n".join(sf_log))]
    card = (staged / "README.md").read_text()
    metadata = card.split("---")[1]
    assert len(returns) == 3
    score = f"{sum(returns) / 3:.2f} +/- {np.std(returns):.2f}"
    assert f"value: {score}" in metadata and "name: CartPole-v1" in metadata
    assert f"Mean reward **{score}** over 3 episodes" in card
    assert "python -m sf_examples.enjoy_gym_env --env=CartPole-v1" in card and "--max_num_episodes=3" in card
    assert f"python -m sf.huggingface.load_from_hub -r {REPO}" in card
    assert "--push_to_hub" not in card


def test_a_loaded_snapshot_is_an_experiment_enjoy_plays_offline(experiment, hub, tmp_path, sf_log, monkeypatch):
    assert _enjoy(experiment, "--max_num_episodes=1", "--push_to_hub", f"--hf_repository={REPO}") == 0
    train_dir = tmp_path / "elsewhere"
    assert load_from_hub.main(["-r", REPO, "-d", str(train_dir)]) == 0
    loaded = train_dir / "cartpole-sf"
    assert sorted(p.name for p in loaded.iterdir()) == ["README.md", "checkpoint_p0", "config.json"]
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # nothing below may reach the Hub
    sf_log.clear()
    assert _enjoy(loaded, "--max_num_episodes=2") == 0
    out = "\n".join(sf_log)
    assert "loaded policy version 7 (896 env frames)" in out and "Avg episode reward" in out


def test_a_push_with_the_hub_unreachable_is_one_line_and_loses_nothing(experiment, sf_log, monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    before = {p: p.read_bytes() for p in experiment.rglob("*") if p.is_file()}
    assert _enjoy(experiment, "--max_num_episodes=1", "--push_to_hub", f"--hf_repository={REPO}") == 1
    errors = [line for line in sf_log if "cannot push" in line]
    assert len(errors) == 1
    assert f"cannot push {experiment / STAGING} to {REPO} on the Hugging Face Hub: OfflineModeIsEnabled" in errors[0]
    assert all(p.read_bytes() == data for p, data in before.items())  # the experiment as it was
    assert (experiment / STAGING / "README.md").is_file()  # and the staged folder, to push again


def test_a_load_with_the_hub_unreachable_is_one_line_and_leaves_train_dir_alone(tmp_path):
    train_dir = tmp_path / "train_dir"
    (train_dir / "mine").mkdir(parents=True)
    (train_dir / "mine" / "config.json").write_text("{}")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "sf.huggingface.load_from_hub", "-r", REPO, "-d", str(train_dir)],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"sf: error: cannot download {REPO} from the Hugging Face Hub: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in train_dir.iterdir()) == ["mine"]


def test_loading_over_an_existing_experiment_is_refused_before_any_download(tmp_path, hub, capsys):
    (tmp_path / "train_dir" / "cartpole-sf").mkdir(parents=True)
    (tmp_path / "train_dir" / "cartpole-sf" / "config.json").write_text(json.dumps({"env": "mine"}))
    assert load_from_hub.main(["-r", REPO, "-d", str(tmp_path / "train_dir")]) == 1
    assert "exists; remove it or load into another --train_dir" in capsys.readouterr().err
    assert json.loads((tmp_path / "train_dir" / "cartpole-sf" / "config.json").read_text()) == {"env": "mine"}


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--push_to_hub"], "--hf_repository: --push_to_hub=True needs the repository as <user>/<repo>, got None"),
        (["--push_to_hub", "--hf_repository=norepo"], "got 'norepo'"),
    ],
)
def test_a_push_without_a_repository_is_refused_before_anything_runs(flags, message):
    from sf.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_full_cfg(["--env=CartPole-v1", *flags], evaluation=True)
