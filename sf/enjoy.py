"""Evaluation: load the newest (or, with --load_checkpoint_kind=best, the best) checkpoint of an experiment,
play episodes, print the average reward, optionally record them as an mp4 and push the policy, its score and the
replay to the Hugging Face Hub (`--push_to_hub --hf_repository=<user>/<repo>`, `sf.huggingface`)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from sf.cfg.arguments import load_cfg_json, resolve_device
from sf.envs import EnvAdapter, EnvConfig, create_env
from sf.envs.episodes import reported_episode
from sf.envs.families import family_of
from sf.envs.spaces import EnvInfo
from sf.huggingface.hub import HubError, push, stage
from sf.huggingface.model_card import Score, command_line
from sf.runtime.checkpoint import CheckpointManager
from sf.runtime.setup import build_model
from sf.utils.fast_exit import skip_final_collection
from sf.utils.logging import setup_logging

log = logging.getLogger("sf")

DEFAULT_EPISODES = 5


def merged_cfg(cli_cfg):
    """The experiment's saved config, with whatever was given on this command line on top."""
    path = Path(cli_cfg.train_dir) / cli_cfg.experiment / "config.json"
    if not path.exists():
        raise FileNotFoundError(
            f"no experiment at {path.parent} (config.json missing): check --train_dir and --experiment"
        )
    cfg = load_cfg_json(path)
    for key, value in vars(cli_cfg).items():
        if key in cli_cfg.cli_args or not hasattr(cfg, key):
            setattr(cfg, key, value)
    if cfg.eval_env_frameskip is not None:
        cfg.env_frameskip = cfg.eval_env_frameskip
    return cfg


def load_policy(cfg, info: EnvInfo, device: str):
    """The model of the experiment's `--load_checkpoint_kind` checkpoint, in eval mode, built as training built it
    (by the model factory's functions registered in this process)."""
    model = build_model(cfg, info, device)
    checkpoints = CheckpointManager(Path(cfg.train_dir) / cfg.experiment, cfg.policy_index, cfg.keep_checkpoints)
    state = checkpoints.load(cfg.load_checkpoint_kind, device)
    if state is None:
        raise FileNotFoundError(
            f"no {cfg.load_checkpoint_kind} checkpoint in {checkpoints.dir} "
            f"(--load_checkpoint_kind={cfg.load_checkpoint_kind})"
        )
    model.load_state_dict(state["model"])
    model.eval()
    log.info("loaded policy version %d (%d env frames)", state["version"], state["env_steps"])
    return model


def enjoy(cli_cfg) -> int:
    skip_final_collection()
    setup_logging(cli_cfg.log_level)
    cfg = merged_cfg(cli_cfg)
    episodes_wanted = int(cfg.max_num_episodes) if "max_num_episodes" in cli_cfg.cli_args else DEFAULT_EPISODES
    render_mode = "rgb_array" if cfg.save_video else None
    env = EnvAdapter(create_env(cfg.env, cfg, EnvConfig(), render_mode=render_mode), cfg.env_framestack)
    device = resolve_device(cfg)
    model = load_policy(cfg, EnvInfo(env.obs_spec, env.action_spec, env.reward_scale, env.frameskip), device)

    frames: list[np.ndarray] = []
    returns: list[float] = []
    obs = env.reset(seed=cfg.seed)
    rnn = torch.zeros(1, model.rnn_state_size, device=device) if model.rnn_state_size else None
    episode_return, episode_length, total_frames = 0.0, 0, 0
    with torch.no_grad():
        while len(returns) < episodes_wanted and total_frames < cfg.max_num_frames:
            if cfg.save_video and len(frames) < cfg.video_frames:
                frames.append(env.render())
            batch = {k: torch.as_tensor(v, device=device).unsqueeze(0) for k, v in obs.items()}
            out = model(model.normalize_obs(batch), rnn, deterministic=cfg.eval_deterministic)
            rnn = out.new_rnn_states if rnn is not None else None
            obs, reward, terminated, truncated, info = env.step(out.actions[0].cpu().numpy())
            episode_return += reward
            episode_length += 1
            total_frames += env.frameskip
            if terminated or truncated:
                episode = reported_episode(info, episode_return, episode_length, cfg.use_record_episode_statistics)
                if episode is not None:  # else the env's own episode goes on (a lost life): keep playing it
                    returns.append(episode[0])
                    log.info("episode %d: reward %.3f", len(returns), episode[0])
                episode_return, episode_length = 0.0, 0
                obs = env.reset()
                if rnn is not None:
                    rnn.zero_()
    env.close()
    if returns:
        log.info("Avg episode reward: %.3f over %d episodes", float(np.mean(returns)), len(returns))
    video = None
    if cfg.save_video and frames:
        video = save_video(
            frames, Path(cfg.train_dir) / cfg.experiment / (cfg.video_name or "replay.mp4"), cfg.fps or 30
        )
        log.info("video written to %s", video)
    return push_policy(cfg, cli_cfg.cli_args, returns, video) if cfg.push_to_hub else 0


def push_policy(cfg, cli_args: dict, returns: list[float], video: Path | None) -> int:
    """`--push_to_hub`: stage the evaluated policy with its score (and the replay, if one was recorded) and upload
    it; a failed upload is one error line, status 1, and the staged folder kept. `cli_args`: the flags this
    evaluation was given, for the command in the model card."""
    family = family_of(cfg.env)
    enjoy_module = cfg.enjoy_script or family.enjoy_module or "<enjoy module of the env>"
    played = {k: v for k, v in cli_args.items() if k not in ("push_to_hub", "hf_repository")}
    score = Score(returns, command_line(enjoy_module, played)) if returns else None
    if video is None:
        log.info("no replay to push: --save_video=True records one")
    try:
        folder = stage(
            Path(cfg.train_dir) / cfg.experiment,
            env=cfg.env,
            repo_id=cfg.hf_repository,
            policy_index=cfg.policy_index,
            checkpoint_kind=cfg.load_checkpoint_kind,
            enjoy_module=enjoy_module,
            train_module=cfg.train_script or family.train_module,
            score=score,
            video=video,
        )
        log.info("staged for the Hub in %s", folder)
        url = push(folder, cfg.hf_repository)
    except HubError as err:
        log.error("%s (what was staged stays; push it again with python -m sf.huggingface.push_to_hub)", err)
        return 1
    log.info("pushed to %s", url)
    return 0


def save_video(frames: list[np.ndarray], path: Path, fps: int) -> Path:
    import imageio.v2 as imageio

    with imageio.get_writer(path, fps=fps, macro_block_size=1) as writer:
        for frame in frames:
            writer.append_data(np.asarray(frame))
    return path
