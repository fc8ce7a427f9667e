"""EnvPool as a vector env source: batch steps of any subset of envs, resets that keep Atari's game going after a lost
life, both EnvPool modes alike, the rollout worker's batch step, and the errors asked for before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from gymnasium import spaces

pytest.importorskip("envpool")

from sf.cfg.arguments import parse_full_cfg  # noqa: E402
from sf.envs.episodes import reported_episode  # noqa: E402
from sf.envs.registry import create_vector_env  # noqa: E402
from sf.envs.spaces import UnsupportedSpaceError  # noqa: E402
from sf.envs.vector import VectorConfig, batch_action_converter, batch_obs_converter  # noqa: E402
from sf.utils.errors import ConfigError  # noqa: E402
from sf_examples.atari.atari_envs import atari_defaults, register_atari_envs  # noqa: E402
from sf_examples.envpool.atari.envpool_atari import register_envpool_atari_envs  # noqa: E402
from sf_examples.envpool.mujoco.envpool_mujoco import register_envpool_mujoco_envs  # noqa: E402
from sf_examples.mujoco.mujoco_envs import register_mujoco_envs  # noqa: E402


def pool_cfg(**overrides) -> SimpleNamespace:
    values = {"env_frameskip": 4, "env_framestack": 4, "seed": 7, "envpool_mode": "sync", "envpool_num_threads": 2}
    return SimpleNamespace(**{**values, **overrides})


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_atari_envs()
    register_mujoco_envs()
    register_envpool_atari_envs()
    register_envpool_mujoco_envs()


def test_batch_conversions():
    spec, to_env = batch_action_converter(spaces.Discrete(3, start=2))
    assert spec.discrete_sizes == (3,) and to_env(np.array([[0.0], [2.0]], np.float32)).tolist() == [2, 4]
    spec, to_env = batch_action_converter(spaces.Box(-1.0, 1.0, (2,), np.float64))
    assert spec.continuous_dim == 2 and to_env(np.array([[3.0, -0.5]], np.float32)).tolist() == [[1.0, -0.5]]
    spec, to_sf = batch_obs_converter(spaces.Box(-np.inf, np.inf, (17,), np.float64))
    assert spec == {"obs": ((17,), np.dtype(np.float32))} and to_sf(np.zeros((3, 17)))["obs"].dtype == np.float32
    with pytest.raises(UnsupportedSpaceError, match="channels-first"):
        batch_obs_converter(spaces.Box(0, 255, (84, 84, 3), np.uint8))


def test_atari_pool_steps_any_subset_in_the_order_asked():
    env = create_vector_env("atari_breakout", pool_cfg(), VectorConfig(0, 4, 0))
    try:
        assert env.obs_spec == {"obs": ((4, 84, 84), np.dtype(np.uint8))} and env.frameskip == 4
        first = env.reset()["obs"]
        assert first.shape == (4, 4, 84, 84)
        step = env.step(np.array([3, 1], np.int32), np.array([[1.0], [0.0]], np.float32))
        assert step.obs["obs"].shape == (2, 4, 84, 84) and step.rewards.dtype == np.float32
        assert (step.obs["obs"][0, :3] == first[3, 1:]).all()  # env 3's stack moved by one frame, oldest first
    finally:
        env.close()


def play(env, steps: int) -> tuple[list[np.ndarray], list[dict], int]:
    """Random play of every env; the observations, the reported episodes and the terminal steps seen."""
    rng = np.random.default_rng(1)
    ids = np.arange(env.num_envs, dtype=np.int32)
    frames, episodes, terminal = [env.reset()["obs"].copy()], [], 0
    for _ in range(steps):
        step = env.step(ids, rng.integers(0, 4, (env.num_envs, 1)).astype(np.float32))
        frames.append(step.obs["obs"].copy())
        terminal += int((step.terminated | step.truncated).sum())
        episodes += [info["episode"] for info in step.infos.values()]
    return frames, episodes, terminal


def test_a_lost_life_goes_on_and_the_game_score_is_reported_once():
    env = create_vector_env("atari_breakout", pool_cfg(), VectorConfig(0, 2, 0))
    try:
        _, episodes, terminal = play(env, 700)
    finally:
        env.close()
    assert episodes and terminal >= 5 * len(episodes)  # five lives per game: only the game's end is an episode
    assert all(episode["r"] >= 0 and episode["l"] > 20 for episode in episodes)


def test_async_mode_steps_the_same_games_as_sync():
    runs = []
    for mode in ("sync", "async"):
        env = create_vector_env("atari_pong", pool_cfg(envpool_mode=mode), VectorConfig(0, 3, 0))
        try:
            runs.append(play(env, 60)[0])
        finally:
            env.close()
    assert all((a == b).all() for a, b in zip(*runs))


def test_mujoco_pool():
    env = create_vector_env("mujoco_halfcheetah", pool_cfg(), VectorConfig(0, 2, 0))
    try:
        assert env.obs_spec == {"obs": ((17,), np.dtype(np.float32))} and env.action_spec.continuous_dim == 6
        step = env.step(np.array([0, 1], np.int32), np.zeros((2, 6), np.float32))
        assert step.obs["obs"].dtype == np.float32 and not step.terminated.any()
    finally:
        env.close()


def test_first_episodes_cut_as_on_the_per_env_path():
    """--decorrelate_by_truncation: env 1's first episode ends after 3 steps, truncated, then runs its full 1000."""
    env = create_vector_env("mujoco_halfcheetah", pool_cfg(), VectorConfig(0, 2, 0))
    try:
        assert env.max_episode_steps == 1000
        env.reset()
        env.cut_first_episodes(np.array([0, 3]))
        ids, actions = np.array([0, 1], np.int32), np.zeros((2, 6), np.float32)
        ends = [env.step(ids, actions).truncated.tolist() for _ in range(6)]
    finally:
        env.close()
    assert ends == [[False, False], [False, False], [False, True], [False, False], [False, False], [False, False]]


def test_env_agents_fill_each_workers_pool():
    cfg = parse_full_cfg(["--env=atari_breakout", "--envpool=True", "--env_agents=16"], defaults=atari_defaults)
    assert cfg.num_envs_per_worker == 16
    with pytest.raises(ConfigError, match="needs --envpool=True or --batched_sampling=True"):
        parse_full_cfg(["--env=atari_breakout", "--env_agents=16"], defaults=atari_defaults)


def test_env_stats_decide_what_is_reported():
    assert reported_episode({}, 3.0, 40, from_env_stats=False) == (3.0, 40)
    assert reported_episode({}, 3.0, 40, from_env_stats=True) is None  # a lost life: the game goes on
    assert reported_episode({"episode": {"r": 11.0, "l": 900}}, 3.0, 40, from_env_stats=True) == (11.0, 900)


def test_an_env_envpool_lacks_fails_before_anything_starts(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sf_examples.train_gym_env", "--env=CartPole-v1", "--envpool=True"]
        + [f"--train_dir={tmp_path}", "--device=cpu"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "'CartPole-v1' has no EnvPool version" in result.stderr and not any(tmp_path.iterdir())


def test_serial_run_through_envpool_reports_games_and_times_the_batch_step(tmp_path):
    from sf_examples.atari.train_atari import main

    flags = ["--env=atari_breakout", "--envpool=True", "--serial_mode=True", "--num_workers=1"]
    flags += ["--num_envs_per_worker=4", "--worker_num_splits=2", "--rollout=32", "--batch_size=128"]
    flags += ["--num_batches_per_epoch=1", "--num_epochs=1", "--train_for_env_steps=6000", "--device=cpu"]
    flags += [f"--train_dir={tmp_path}", "--experiment=ep", "--seed=1", "--envpool_num_threads=1"]
    assert main(flags) == 0
    summary = json.loads((tmp_path / "ep" / "summary.json").read_text())
    profile = json.loads((tmp_path / "ep" / "profile.json").read_text())
    assert summary["status"] == "ok" and summary["num_episodes"] >= 1
    env_step = profile["RolloutWorker_w0"]["tree"]["env_step"]
    assert 0 < env_step["children"]["batch_step"]["time"] <= env_step["time"]


def test_without_envpool_the_error_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['envpool'] = None\n"
        "from sf_examples.mujoco.train_mujoco import main\n"
        f"sys.exit(main(['--env=mujoco_hopper', '--envpool=True', '--train_dir={tmp_path}', '--device=cpu']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "pip install 'sf[envpool]'" in result.stderr and not any(tmp_path.iterdir())
