"""The Atari 2600 games of ale-py under Sample Factory's names, the wrapper stack they train with, and its defaults.

The stack is the one Sample Factory, Stable-Baselines3 and CleanRL use (the DQN paper's), each step meaning the same:
a `NoFrameskip-v4` game (no sticky actions, the minimal action set), up to 30 no-op actions after a real reset, each
action repeated `--env_frameskip` (4) frames with the observation the max of the last two, 84x84 grayscale, a lost
life ends the episode for the learner but not the game, FIRE pressed after a reset where the game needs it, rewards
clipped to their sign, and the last `--env_framestack` (4) observations stacked. Returns in logs, TensorBoard and
`summary.json` are the game's own score over a whole game (`--use_record_episode_statistics`, on by default here),
not the clipped per-life sums the learner trains on.
"""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium
import numpy as np

from sf.envs.registry import EnvConfig, EnvNotFoundError, register_env

# Sample Factory's names; each is the `<Game>NoFrameskip-v4` id of ale-py
ATARI_GAMES: dict[str, str] = {
    "atari_alien": "Alien",
    "atari_amidar": "Amidar",
    "atari_assault": "Assault",
    "atari_asterix": "Asterix",
    "atari_asteroid": "Asteroids",
    "atari_atlantis": "Atlantis",
    "atari_bankheist": "BankHeist",
    "atari_battlezone": "BattleZone",
    "atari_beamrider": "BeamRider",
    "atari_berzerk": "Berzerk",
    "atari_bowling": "Bowling",
    "atari_boxing": "Boxing",
    "atari_breakout": "Breakout",
    "atari_centipede": "Centipede",
    "atari_choppercommand": "ChopperCommand",
    "atari_crazyclimber": "CrazyClimber",
    "atari_defender": "Defender",
    "atari_demonattack": "DemonAttack",
    "atari_doubledunk": "DoubleDunk",
    "atari_enduro": "Enduro",
    "atari_fishingderby": "FishingDerby",
    "atari_freeway": "Freeway",
    "atari_frostbite": "Frostbite",
    "atari_gopher": "Gopher",
    "atari_gravitar": "Gravitar",
    "atari_hero": "Hero",
    "atari_icehockey": "IceHockey",
    "atari_jamesbond": "Jamesbond",
    "atari_kangaroo": "Kangaroo",
    "atari_krull": "Krull",
    "atari_kongfumaster": "KungFuMaster",
    "atari_montezuma": "MontezumaRevenge",
    "atari_mspacman": "MsPacman",
    "atari_namethisgame": "NameThisGame",
    "atari_phoenix": "Phoenix",
    "atari_pitfall": "Pitfall",
    "atari_pong": "Pong",
    "atari_privateye": "PrivateEye",
    "atari_qbert": "Qbert",
    "atari_riverraid": "Riverraid",
    "atari_roadrunner": "RoadRunner",
    "atari_robotank": "Robotank",
    "atari_seaquest": "Seaquest",
    "atari_skiing": "Skiing",
    "atari_solaris": "Solaris",
    "atari_spaceinvaders": "SpaceInvaders",
    "atari_stargunner": "StarGunner",
    "atari_surround": "Surround",
    "atari_tennis": "Tennis",
    "atari_timepilot": "TimePilot",
    "atari_tutankham": "Tutankham",
    "atari_upndown": "UpNDown",
    "atari_venture": "Venture",
    "atari_videopinball": "VideoPinball",
    "atari_wizardofwor": "WizardOfWor",
    "atari_yarsrevenge": "YarsRevenge",
    "atari_zaxxon": "Zaxxon",
}

# Sample Factory gives Montezuma's Revenge an 18,000-step limit on the gym.make result, where gymnasium 0.29 has no
# TimeLimit to read it (so its runs keep ALE's 108,000 frames); sf applies it, in emulator frames (5 minutes of play)
MAX_FRAMES: dict[str, int] = {"atari_montezuma": 18_000}
ALE_MAX_FRAMES = 108_000  # ale-py's own limit per game: 30 minutes at 60 frames per second

ATARI_FPS = 60  # frames the console shows per second

INSTALL_HINT = "pip install 'sf[atari]' (ale-py, which ships the ROMs, and OpenCV)"


def gym_id(env_name: str) -> str:
    """`atari_breakout` -> `BreakoutNoFrameskip-v4`; an unknown name lists the close ones."""
    game = ATARI_GAMES.get(env_name)
    if game is None:
        raise EnvNotFoundError(unknown_game_message(env_name))
    return f"{game}NoFrameskip-v4"


def unknown_game_message(env_name: str) -> str:
    close = difflib.get_close_matches(env_name, list(ATARI_GAMES), n=3, cutoff=0.8)
    if close:
        return f"{env_name!r} is not an Atari game; did you mean: {', '.join(close)}?"
    return f"{env_name!r} is not an Atari game; known: {', '.join(ATARI_GAMES)}"


def require_ale() -> Any:
    """The ale_py module; without it (or OpenCV, which the preprocessing resizes with) an error naming the extra."""
    try:
        import ale_py
        import cv2  # noqa: F401
    except ImportError as exc:
        raise EnvNotFoundError(f"Atari games need the ale-py and opencv packages ({exc}): {INSTALL_HINT}") from None
    return ale_py


def make_atari_env(
    full_env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None
) -> gymnasium.Env:
    """The wrapper stack of the module docstring; seeding comes through `reset(seed=...)`."""
    from gymnasium.wrappers import AtariPreprocessing, RecordEpisodeStatistics, TransformReward

    from sf_examples.atari.atari_wrappers import EpisodicLife, FireReset, has_fire_action

    game_id = gym_id(full_env_name)
    gymnasium.register_envs(require_ale())
    frameskip = int(getattr(cfg, "env_frameskip", 4))
    max_frames = MAX_FRAMES.get(full_env_name, ALE_MAX_FRAMES)
    env = gymnasium.make(game_id, render_mode=render_mode, max_num_frames_per_episode=max_frames)
    env = AtariPreprocessing(env, noop_max=30, frame_skip=frameskip, screen_size=84, grayscale_newaxis=True)
    env = RecordEpisodeStatistics(env)  # counts agent steps and the raw score of the whole game
    env = EpisodicLife(env)
    if has_fire_action(env):
        env = FireReset(env)
    env = TransformReward(env, np.sign)
    env.frameskip = frameskip  # emulator frames per agent step: frame counts and FPS include them
    return env


def register_atari_envs() -> None:
    """Every game (its EnvPool version, for `--envpool=True`, is the family's `register_vector`)."""
    for name in ATARI_GAMES:
        register_env(name, make_atari_env)


def atari_defaults(env_name: str) -> dict[str, Any]:
    """Sample Factory's Atari defaults (CleanRL's PPO settings); the parser puts YAML and the command line above."""
    gym_id(env_name)
    return {
        "use_record_episode_statistics": True,  # report the game's score over whole games, not clipped lives
        "encoder_conv_architecture": "convnet_atari",  # the Nature DQN trunk: 32 8x8/4, 64 4x4/2, 64 3x3/1
        "encoder_conv_mlp_layers": [512],
        "nonlinearity": "relu",
        "obs_scale": 255.0,  # uint8 pixels to [0, 1] on the device
        "normalize_input": True,
        "normalize_returns": True,
        "env_frameskip": 4,  # each action repeats 4 frames; FPS counts frames
        "env_framestack": 4,  # motion from the last 4 observations
        "use_rnn": False,  # the frame stack carries what the policy needs to remember
        "recurrence": 1,
        "adaptive_stddev": False,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "rollout": 128,
        "batch_size": 256,
        "num_batches_per_epoch": 4,  # 4 x 256 = 1024 samples per iteration, 4 epochs over them
        "num_epochs": 4,
        "ppo_clip_ratio": 0.1,
        "value_loss_coeff": 0.5,
        "exploration_loss": "entropy",
        "exploration_loss_coeff": 0.01,
        "kl_loss_coeff": 0.0,
        "with_vtrace": False,
        "reward_scale": 1.0,  # rewards are already clipped to [-1, 1] by the env
        "learning_rate": 2.5e-4,
        "lr_schedule": "linear_decay",
        "adam_eps": 1e-5,  # CleanRL's value
        "max_grad_norm": 0.5,
        "shuffle_minibatches": False,
        "num_workers": 8,
        "num_envs_per_worker": 1,
        "worker_num_splits": 1,
        "serial_mode": False,
        "async_rl": False,  # Sample Factory's Atari example trains synchronously
        "experiment_summaries_interval": 3,
        "train_for_env_steps": 10_000_000,
    }
