"""The bundled ViZDoom scenarios open headless, step with the declared spaces, and honour frameskip, time limits and
seeds."""

from __future__ import annotations

import argparse
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("vizdoom")

from sf.envs import EnvAdapter, EnvConfig, EnvNotFoundError, create_env  # noqa: E402
from sf.envs.registry import registered_envs  # noqa: E402
from sf_examples.vizdoom.doom_env import DoomEnv  # noqa: E402
from sf_examples.vizdoom.doom_envs import (  # noqa: E402
    DOOM_SCENARIOS,
    add_doom_args,
    doom_defaults,
    make_doom_env,
    register_doom_envs,
)
from sf_examples.vizdoom.resize import NearestResize  # noqa: E402


def doom_cfg(**overrides) -> SimpleNamespace:
    return SimpleNamespace(**{"env_frameskip": 4, "res_w": 128, "res_h": 72, "wide_aspect_ratio": False, **overrides})


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_doom_envs()
    register_doom_envs()  # idempotent


def test_all_scenarios_registered():
    assert set(DOOM_SCENARIOS) <= set(registered_envs())


@pytest.mark.parametrize("name", list(DOOM_SCENARIOS))
def test_scenario_steps_with_declared_spaces(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the game must leave the working directory untouched
    raw = create_env(name, doom_cfg(), EnvConfig(env_id=1))
    env = EnvAdapter(raw)
    workdir = os.path.dirname(raw.game.get_doom_config_path())
    try:
        assert raw.observation_space.shape == (3, 72, 128) and raw.observation_space.dtype == np.uint8
        assert env.obs_spec == {"obs": ((3, 72, 128), np.dtype(np.uint8))}
        assert env.action_spec.discrete_sizes == (len(DOOM_SCENARIOS[name].actions),)
        assert env.frameskip == 4 and env.reward_scale == DOOM_SCENARIOS[name].reward_scale

        obs = env.reset(seed=5)["obs"]
        assert raw.observation_space.contains(obs) and obs.std() > 0  # a rendered scene, not a blank frame
        rng = np.random.default_rng(0)
        for _ in range(6):
            action = np.array([rng.integers(raw.action_space.n)], np.float32)
            obs, reward, terminated, truncated, _ = env.step(action)
            assert raw.observation_space.contains(obs["obs"]) and math.isfinite(reward)
            if terminated or truncated:
                env.reset()
        assert raw.game.is_running() and os.path.isdir(workdir)
    finally:
        env.close()
    assert not raw.game.is_running() and not os.path.exists(workdir)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("frameskip", [4, 3])
def test_frameskip_and_time_limit_in_game_tics(frameskip):
    """doom_basic pays -1 per tic and ends after 300 tics: standing still shows both the skip and the limit."""
    env = make_doom_env("doom_basic", doom_cfg(env_frameskip=frameskip), None)
    try:
        assert env.frameskip == frameskip
        env.reset(seed=0)
        rewards, terminated, truncated = [], False, False
        while not (terminated or truncated):
            _, reward, terminated, truncated, _ = env.step(0)
            rewards.append(reward)
    finally:
        env.close()
    assert truncated and not terminated
    assert len(rewards) == math.ceil(DOOM_SCENARIOS["doom_basic"].timeout_tics / frameskip)
    assert rewards[0] == -frameskip  # raw reward: the runtime applies reward_scale, not the env
    assert sum(rewards) == -DOOM_SCENARIOS["doom_basic"].timeout_tics


def test_same_seed_replays_the_episode():
    env = make_doom_env("doom_benchmark", doom_cfg(), None)

    def frames(seed: int) -> np.ndarray:
        first, _ = env.reset(seed=seed)
        return np.stack([first] + [env.step(i % env.action_space.n)[0] for i in range(25)])

    try:
        replay, again, other = frames(7), frames(7), frames(8)
    finally:
        env.close()
    np.testing.assert_array_equal(replay, again)
    assert not np.array_equal(replay, other)


def test_wide_aspect_ratio_renders_16_9_and_resizes_to_requested_size():
    env = make_doom_env(
        "doom_defend_the_center", doom_cfg(wide_aspect_ratio=True, res_w=64, res_h=36), None, "rgb_array"
    )
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 36, 64) and env.observation_space.contains(obs)
        assert env.render().shape == (144, 256, 3)
    finally:
        env.close()


def test_render_modes():
    with pytest.raises(ValueError, match="human"):
        DoomEnv(DOOM_SCENARIOS["doom_basic"], render_mode="human")
    env = make_doom_env("doom_basic", doom_cfg(), None)
    try:
        env.reset(seed=0)
        assert env.render() is None
    finally:
        env.close()


def test_unknown_env_names_fail_with_the_known_ones():
    with pytest.raises(EnvNotFoundError, match="doom_basic"):
        make_doom_env("doom_basik", doom_cfg(), None)
    with pytest.raises(EnvNotFoundError, match="doom_benchmark"):
        doom_defaults("doom_benchmarks")


def test_nearest_resize_picks_the_pixel_under_each_centre():
    frame = np.arange(2 * 4 * 6, dtype=np.uint8).reshape(2, 4, 6)
    out = NearestResize((4, 6), (2, 3))(frame)
    np.testing.assert_array_equal(out, frame[:, [1, 3]][:, :, [1, 3, 5]])
    upscaled = NearestResize((4, 6), (8, 12))(frame)
    np.testing.assert_array_equal(upscaled, frame.repeat(2, axis=1).repeat(2, axis=2))
    assert NearestResize((4, 6), (4, 6))(frame) is frame


def test_doom_args_parse_sample_factory_style_bools():
    parser = argparse.ArgumentParser()
    add_doom_args(parser)
    assert parser.parse_args([]) == argparse.Namespace(res_w=128, res_h=72, wide_aspect_ratio=False)
    assert parser.parse_args(["--wide_aspect_ratio=True", "--res_w=160"]).wide_aspect_ratio is True
    assert parser.parse_args(["--wide_aspect_ratio=False"]).wide_aspect_ratio is False
    assert parser.parse_args(["--wide_aspect_ratio"]).wide_aspect_ratio is True
    with pytest.raises(SystemExit):
        parser.parse_args(["--wide_aspect_ratio=maybe"])


def test_defaults_are_recurrent_pixel_appo():
    defaults = doom_defaults("doom_benchmark")
    assert defaults["use_rnn"] is True and defaults["rnn_type"] == "gru"
    assert defaults["encoder_conv_architecture"] == "convnet_simple"
    assert "recurrence" not in defaults  # -1 resolves to --rollout, so a shorter --rollout alone stays valid
    assert defaults["batch_size"] % defaults["rollout"] == 0
    assert defaults["num_envs_per_worker"] % defaults["worker_num_splits"] == 0
    assert "reward_scale" not in defaults  # scaling comes from each scenario's env attribute


def test_default_model_has_sample_factorys_doom_shape():
    """convnet_simple (32x8/4, 64x4/2, 128x3/2) -> FC 512 -> GRU 512 -> linear heads, as Sample Factory builds for
    Doom."""
    from sf.cfg.arguments import parse_full_cfg
    from sf.model.activations import Activation
    from sf.runner.build import build_model, probe_env

    cfg = parse_full_cfg(["--env=doom_basic", "--rollout=16"], add_args=add_doom_args, defaults=doom_defaults)
    assert cfg.recurrence == 16
    model = build_model(cfg, probe_env(cfg), "cpu")
    shapes = [tuple(p.shape) for name, p in model.named_parameters() if "weight" in name]
    assert shapes == [
        (32, 3, 8, 8),
        (64, 32, 4, 4),
        (128, 64, 3, 3),
        (512, 128 * 3 * 6),
        (3 * 512, 512),
        (3 * 512, 512),
        (len(DOOM_SCENARIOS["doom_basic"].actions), 512),
        (1, 512),
    ]
    assert any(isinstance(m, torch.nn.GRU) for m in model.modules())
    assert any(isinstance(m, Activation) and m.kind == "elu" for m in model.modules())
