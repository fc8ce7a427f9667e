"""The Atari family: Sample Factory's names, the wrapper stack's meaning (episodic life, fire reset, clipping, 84x84
grayscale, frame stack, action repeat) and the errors a user meets first."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ale_py")

from sf.cfg.arguments import parse_full_cfg  # noqa: E402
from sf.envs import EnvAdapter, EnvNotFoundError, create_env  # noqa: E402
from sf.envs.registry import registered_envs  # noqa: E402
from sf_examples.atari.atari_envs import (  # noqa: E402
    ATARI_GAMES,
    atari_defaults,
    gym_id,
    make_atari_env,
    register_atari_envs,
)
from sf_examples.atari.atari_wrappers import has_fire_action  # noqa: E402

CFG = SimpleNamespace(env_frameskip=4)


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_atari_envs()


def test_sample_factorys_names():
    # Sample Factory 2.1.1's example registers these 57 names
    assert len(ATARI_GAMES) == 57 and set(ATARI_GAMES) <= set(registered_envs())
    assert gym_id("atari_breakout") == "BreakoutNoFrameskip-v4"
    assert gym_id("atari_montezuma") == "MontezumaRevengeNoFrameskip-v4"
    assert gym_id("atari_spaceinvaders") == "SpaceInvadersNoFrameskip-v4"


def test_observations_actions_and_frame_counting():
    env = EnvAdapter(create_env("atari_breakout", CFG), framestack=4)
    try:
        assert env.obs_spec == {"obs": ((4, 84, 84), np.dtype(np.uint8))}
        assert env.action_spec.discrete_sizes == (4,)  # the minimal action set, not the full 18
        assert env.frameskip == 4
        obs = env.reset(seed=3)["obs"]
        assert (obs[0] == obs[3]).all() and obs.std() > 0  # a reset fills the stack with its first frame
        frames_before = env.env.unwrapped.ale.getEpisodeFrameNumber()
        obs = env.step(np.array([0], np.float32))[0]["obs"]
        assert env.env.unwrapped.ale.getEpisodeFrameNumber() - frames_before == 4  # each action repeats 4 frames
    finally:
        env.close()


def test_a_lost_life_ends_the_learners_episode_and_the_game_goes_on():
    env = make_atari_env("atari_breakout", CFG, None)
    env.reset(seed=1)
    ale = env.unwrapped.ale
    rng = np.random.default_rng(0)
    clipped, terminations, lives_seen = 0.0, 0, []
    for _ in range(20_000):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(4)))
        assert reward in (-1.0, 0.0, 1.0)  # clipped to its sign
        clipped += reward
        if terminated or truncated:
            terminations += 1
            lives_seen.append(ale.lives())
            if "episode" in info:
                break
            env.reset()
    assert lives_seen == [4, 3, 2, 1, 0]  # five terminal steps, one per life, before the game reset
    # the reported return is the game's score over all five lives: at least one point per clipped brick
    assert info["episode"]["r"] >= clipped and info["episode"]["l"] > terminations
    env.close()


def test_fire_is_pressed_where_the_game_needs_it():
    breakout, freeway = make_atari_env("atari_breakout", CFG, None), make_atari_env("atari_freeway", CFG, None)
    assert has_fire_action(breakout) and not has_fire_action(freeway)
    breakout.reset(seed=0)
    ram_ball_y = 101  # Breakout keeps the ball's y position here; 0 until FIRE serves it
    served = [breakout.unwrapped.ale.getRAM()[ram_ball_y]]
    for _ in range(10):
        breakout.step(0)
        served.append(breakout.unwrapped.ale.getRAM()[ram_ball_y])
    assert len(set(served)) > 1  # the ball moves without the agent ever pressing FIRE
    breakout.close()
    freeway.close()


def test_defaults_are_sample_factorys():
    cfg = parse_full_cfg(["--env=atari_breakout"], defaults=atari_defaults)
    assert cfg.env_frameskip == 4 and cfg.env_framestack == 4 and cfg.encoder_conv_architecture == "convnet_atari"
    assert (cfg.rollout, cfg.batch_size, cfg.num_batches_per_epoch, cfg.num_epochs) == (128, 256, 4, 4)
    assert cfg.learning_rate == 2.5e-4 and cfg.lr_schedule == "linear_decay" and cfg.adam_eps == 1e-5
    assert cfg.use_record_episode_statistics and not cfg.use_rnn and not cfg.async_rl


def test_an_unknown_game_lists_the_close_names():
    with pytest.raises(EnvNotFoundError, match="did you mean: atari_breakout"):
        gym_id("atari_breakuot")
    result = subprocess.run(
        [sys.executable, "-m", "sf_examples.atari.train_atari", "--env=atari_spaceinvader"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "did you mean: atari_spaceinvaders" in result.stderr


def test_without_ale_py_the_error_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['ale_py'] = None\n"
        "from sf_examples.atari.train_atari import main\n"
        f"sys.exit(main(['--env=atari_pong', '--train_dir={tmp_path}', '--device=cpu']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "pip install 'sf[atari]'" in result.stderr and not (tmp_path / "default_experiment").exists()


def test_an_unknown_name_lists_the_atari_family_folded():
    with pytest.raises(EnvNotFoundError, match=r"registered: .*atari_\* \(57 envs\)") as info:
        create_env("zzzzzzzzzzzzzzzz", CFG)
    assert "atari_alien" not in str(info.value)
