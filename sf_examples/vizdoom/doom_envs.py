"""The bundled ViZDoom scenarios under sf names, their flags, and the APPO defaults that suit pixel-based Doom.

Reward scales bring a good episode's scaled return to roughly 1-20, where the value head learns easily:
scenarios that pay per tic (basic: -1/tic living cost; health gathering: +1/tic alive) or per unit of
distance (deadly corridor) get 0.01, scenarios that pay per kill or per goal get 1.0.
Time limits are in game tics (35 per second), so episode length does not depend on `--env_frameskip`.
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium

from sf.cfg.arguments import str2bool
from sf.envs.registry import EnvConfig, EnvNotFoundError, register_env
from sf_examples.vizdoom.doom_env import DoomEnv, DoomEnvOptions, DoomScenario

NOOP: tuple[str, ...] = ()
TURNS = (("TURN_LEFT",), ("TURN_RIGHT",))
STRAFES = (("MOVE_LEFT",), ("MOVE_RIGHT",))
WALK_AND_TURN = (("MOVE_FORWARD", "TURN_LEFT"), ("MOVE_FORWARD", "TURN_RIGHT"))  # steering needs both at once
AIM_AND_SHOOT = (("TURN_LEFT", "ATTACK"), ("TURN_RIGHT", "ATTACK"), ("MOVE_FORWARD", "ATTACK"))
ONE_MINUTE = 60 * 35

DOOM_SCENARIOS: dict[str, DoomScenario] = {
    # strafe to line up with the single monster and shoot it; the scenario's own 300-tic limit
    "doom_basic": DoomScenario("basic.cfg", (NOOP, *STRAFES, ("ATTACK",)), reward_scale=0.01, timeout_tics=300),
    # turn in place and shoot the monsters closing in; +1 per kill, -1 on death
    "doom_defend_the_center": DoomScenario(
        "defend_the_center.cfg", (NOOP, *TURNS, ("ATTACK",)), reward_scale=1.0, timeout_tics=ONE_MINUTE
    ),
    "doom_defend_the_line": DoomScenario(
        "defend_the_line.cfg", (NOOP, *TURNS, ("ATTACK",)), reward_scale=1.0, timeout_tics=ONE_MINUTE
    ),
    # walk over medkits on an acid floor; +1 per tic alive, -100 on death
    "doom_health_gathering": DoomScenario(
        "health_gathering.cfg",
        (NOOP, *TURNS, ("MOVE_FORWARD",), *WALK_AND_TURN),
        reward_scale=0.01,
        timeout_tics=ONE_MINUTE,
    ),
    "doom_health_gathering_supreme": DoomScenario(
        "health_gathering_supreme.cfg",
        (NOOP, *TURNS, ("MOVE_FORWARD",), *WALK_AND_TURN),
        reward_scale=0.01,
        timeout_tics=ONE_MINUTE,
    ),
    # run down a corridor past shooting monsters to the vest; reward is progress along it, -100 on death
    "doom_deadly_corridor": DoomScenario(
        "deadly_corridor.cfg",
        (
            NOOP,
            ("MOVE_FORWARD",),
            ("MOVE_BACKWARD",),
            *STRAFES,
            *TURNS,
            ("ATTACK",),
            *WALK_AND_TURN,
            ("MOVE_FORWARD", "ATTACK"),
        ),
        reward_scale=0.01,
        timeout_tics=ONE_MINUTE,
    ),
    # find the vest in a maze of rooms; +1 on reaching it, a tiny per-tic cost otherwise
    "doom_my_way_home": DoomScenario(
        "my_way_home.cfg",
        (NOOP, *TURNS, ("MOVE_FORWARD",), *STRAFES, *WALK_AND_TURN),
        reward_scale=1.0,
        timeout_tics=ONE_MINUTE,
    ),
    # Throughput benchmark: `deathmatch` is the bundled scenario closest to a real Doom workload (a large
    # textured arena, many monster types spawning, item and weapon pickups, so rendering and game logic
    # cost what they cost in training). Its 20 buttons become 13 flat discrete move/turn/shoot choices,
    # +1 per kill (the scenario itself rewards nothing), over its own 2-minute episodes.
    "doom_benchmark": DoomScenario(
        "deathmatch.cfg",
        (NOOP, ("MOVE_FORWARD",), ("MOVE_BACKWARD",), *STRAFES, *TURNS, ("ATTACK",), *WALK_AND_TURN, *AIM_AND_SHOOT),
        reward_scale=1.0,
        timeout_tics=2 * ONE_MINUTE,
        kill_reward=1.0,
    ),
}


def _scenario(env_name: str) -> DoomScenario:
    try:
        return DOOM_SCENARIOS[env_name]
    except KeyError:
        raise EnvNotFoundError(f"{env_name!r} is not a Doom env; known: {', '.join(DOOM_SCENARIOS)}") from None


def make_doom_env(
    full_env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None
) -> gymnasium.Env:
    """Registry factory; seeding comes through `reset(seed=...)`, so `env_config` is not needed here."""
    return DoomEnv(_scenario(full_env_name), DoomEnvOptions.from_cfg(cfg), render_mode)


ENGINE_SHM_NAMES = ("ViZDoomSM*", "ViZDoomMQ*")  # each game's shared memory and message queues


def register_doom_envs() -> None:
    for name in DOOM_SCENARIOS:
        register_env(name, make_doom_env, shm_names=ENGINE_SHM_NAMES)


def add_doom_args(parser: argparse.ArgumentParser) -> None:
    defaults = DoomEnvOptions()
    parser.add_argument("--res_w", type=int, default=defaults.res_w, help="observation width after resizing")
    parser.add_argument("--res_h", type=int, default=defaults.res_h, help="observation height after resizing")
    parser.add_argument(
        "--wide_aspect_ratio",
        type=str2bool,
        nargs="?",
        const=True,
        default=defaults.wide_aspect_ratio,
        help="render at 16:9 (256x144, a wider field of view) instead of 160x120 before resizing",
    )


def doom_defaults(env_name: str) -> dict[str, Any]:
    """Flag defaults for Doom; the parser puts YAML and the command line above them."""
    _scenario(env_name)
    return {
        "encoder_conv_architecture": "convnet_simple",  # three conv layers are enough for 128x72 Doom frames
        "encoder_conv_mlp_layers": [512],  # one FC layer between the conv features and the RNN
        "nonlinearity": "elu",  # the usual choice for Doom convnets; keeps gradients alive below zero
        "use_rnn": True,  # Doom is partially observed: memory of what left the screen matters
        "rnn_type": "gru",  # as good as an LSTM here, with less state and compute
        "rnn_size": 512,  # hidden size used in Sample Factory's Doom experiments
        "rnn_num_layers": 1,  # one recurrent layer; depth goes into the encoder
        "env_frameskip": 4,  # repeat each action 4 tics: 4x fewer policy calls, little control lost
        "obs_scale": 255.0,  # uint8 pixels to [0, 1] on the device
        "normalize_input": True,  # running per-pixel mean/std after the /255, as in Sample Factory's Doom setup
        "normalize_returns": True,  # per-scenario reward_scale gets close; this absorbs what remains
        "rollout": 32,  # trajectory length per env between sends to the learner
        "batch_size": 1024,  # samples per SGD step (Sample Factory's default): twice the updates per frame of 2048
        "num_batches_per_epoch": 1,  # one SGD step per iteration keeps policy lag low
        "num_epochs": 1,  # one pass: fresh experience is cheap at Doom's throughput
        "ppo_clip_ratio": 0.1,  # a tight trust region suits single-epoch, slightly off-policy updates
        "ppo_clip_value": 0.2,  # in normalized-return space (std 1), as Sample Factory uses for Doom
        "value_loss_coeff": 0.5,  # the value head shares the encoder; keep it from dominating
        "exploration_loss_coeff": 0.001,  # a small entropy bonus over the discrete button choices
        # twice Sample Factory's 1e-4: doom_basic reached 68-71 at 500k frames with 1e-4 and 78 with 2e-4 here
        # (docs/vizdoom.md), where the learner trains on data ~3 policy versions old and PPO clips 10-40% of it
        "learning_rate": 2e-4,
        "gamma": 0.99,  # ~100-step horizon = ~11 s of game time at frameskip 4
        "gae_lambda": 0.95,  # usual bias/variance balance for the advantage estimate
        "max_grad_norm": 4.0,  # clip rare large RNN gradients without slowing normal updates
        # PyTorch's own layer init: its larger policy-head weights let the policy gradient reach the encoder from
        # the first update; the orthogonal scheme's 0.01-gain head left doom_basic near random for 500k frames
        "policy_initialization": "torch_default",
        "num_envs_per_worker": 8,  # several games per worker amortise each inference round trip
        "worker_num_splits": 2,  # double buffering: half the games step while the other half await actions
    }
