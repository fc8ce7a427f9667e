"""The Brax family: Sample Factory's names, flags and defaults, the one-line error without brax, and on the CPU a
smoke run end to end (train, checkpoint, enjoy) when brax is installed."""

from __future__ import annotations

import json
import re
import sys

import pytest
from conftest import run_sf

from sf.envs.families import family_named
from sf_examples.brax.brax_envs import INSTALL_HINT, SF_BRAX_ENVS


def test_sample_factory_flags_and_defaults():
    cfg = family_named("brax").parse_cfg(["--env=ant", "--device=cpu"])
    assert cfg.batched_sampling and cfg.serial_mode and not cfg.async_rl
    assert (cfg.env_agents, cfg.batch_size, cfg.reward_scale, cfg.num_epochs) == (2048, 32768, 0.01, 5)
    assert (cfg.clamp_actions, cfg.clamp_rew_obs, cfg.brax_render_res, cfg.brax_backend) == (False, False, 200, "auto")
    assert family_named("brax").parse_cfg(["--env=humanoid"]).encoder_mlp_layers == [512, 256, 128]
    assert set(SF_BRAX_ENVS) == {"ant", "humanoid", "halfcheetah", "walker2d"}


def test_without_brax_the_run_ends_with_one_line_saying_what_to_install(monkeypatch, tmp_path, capsys):
    from sf.train import run_rl

    monkeypatch.setitem(sys.modules, "brax", None)  # import brax now fails as where it is not installed
    cfg = family_named("brax").parse_cfg(["--env=ant", "--device=cpu", f"--train_dir={tmp_path}"])
    assert run_rl(cfg) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and INSTALL_HINT in errors[0]


@pytest.mark.slow
def test_inverted_pendulum_trains_checkpoints_and_plays_on_the_cpu(tmp_path):
    """A smoke run: JAX on the CPU compiles for most of a minute on 2 cores, so this is no learning test."""
    pytest.importorskip("brax")
    flags = ["--env=inverted_pendulum", "--device=cpu", f"--train_dir={tmp_path}", "--experiment=ip"]
    train = run_sf(
        [*flags, "--env_agents=64", "--batch_size=2048", "--train_for_env_steps=8192", "--brax_backend=positional"],
        module="sf_examples.brax.train_brax",
        timeout=600,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    summary = json.loads((tmp_path / "ip" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 8192 and summary["num_episodes"] > 0
    assert list((tmp_path / "ip" / "checkpoint_p0").glob("checkpoint_*.pth"))
    play = run_sf([*flags, "--max_num_episodes=3"], module="sf_examples.brax.enjoy_brax", timeout=600)
    assert play.returncode == 0, play.stderr[-3000:]
    assert re.search(r"Avg episode reward: [\d.]+ over \d+ episodes", play.stdout + play.stderr)
