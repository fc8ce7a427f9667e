"""Evaluation: load the newest (or, with --load_checkpoint_kind=best, the best) checkpoint of an experiment,
play episodes, print the average reward, optionally record them as an mp4 and push the policy, its score and the
replay to the Hugging Face Hub (`--push_to_hub --hf_repository=<user>/<repo>`, `sf.huggingface`).

`python -m sf.enjoy --env=<name> --experiment=<name>` evaluates with the example script of the env's family
(`sf.envs.families`). What the user can fix (no such experiment, no checkpoint, an unknown env, a checkpoint of
another env or model) is one `sf: error:` line and exit status 2, as in training.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

from sf.cfg.arguments import resolve_device
from sf.envs import EnvAdapter, EnvConfig, EnvNotFoundError, UnsupportedSpaceError, create_env
from sf.envs.batched import BatchedEnvs, create_batched_envs
from sf.envs.episodes import reported_episode
from sf.envs.families import family_of
from sf.envs.spaces import EnvInfo
from sf.envs.vector import VectorConfig
from sf.experiment.checkpoint import CheckpointError, CheckpointManager
from sf.experiment.config_file import config_path, load_config
from sf.huggingface.hub import HubError, push, stage
from sf.huggingface.model_card import Score, command_line
from sf.model.factory import custom_model_parts
from sf.runner.build import build_model
from sf.utils.errors import ConfigError, error_line
from sf.utils.fast_exit import skip_final_collection
from sf.utils.logging import setup_logging

log = logging.getLogger("sf")

DEFAULT_EPISODES = 5


def merged_cfg(cli_cfg):
    """The experiment's saved config, with whatever was given on this command line on top."""
    path = config_path(Path(cli_cfg.train_dir) / cli_cfg.experiment)
    if not path.exists():
        raise ConfigError(
            f"--experiment: no experiment at {path.parent} (no config.json there); give the --train_dir and "
            "--experiment of a training run",
            flag="--experiment",
        )
    cfg = load_config(path.parent)
    for key, value in vars(cli_cfg).items():
        if key in cli_cfg.cli_args or not hasattr(cfg, key):
            setattr(cfg, key, value)
    if cfg.eval_env_frameskip is not None:
        cfg.env_frameskip = cfg.eval_env_frameskip
    return cfg


def enjoy(cli_cfg) -> tuple[int, float]:
    """Play the episodes. Sample Factory's return: the status (0; 1 when a push failed; 2 with one `sf: error:` line
    for a mistake in the flags, as training does) and the mean return of the episodes played (nan when none
    finished), which a script unpacks: `status, avg_reward = enjoy(cfg)`."""
    skip_final_collection()
    setup_logging(cli_cfg.log_level)
    try:
        cfg = merged_cfg(cli_cfg)
        env = _make_batched_env(cfg) if cfg.batched_sampling else _make_env(cfg)
    except ConfigError as err:
        print(error_line(err), file=sys.stderr)
        return 2, math.nan
    try:
        return (_play_batched if cfg.batched_sampling else _play)(cfg, cli_cfg, env)
    except ConfigError as err:
        print(error_line(err), file=sys.stderr)
        return 2, math.nan
    finally:
        env.close()


def _make_env(cfg) -> EnvAdapter:
    render_mode = "rgb_array" if cfg.save_video else None
    if cfg.save_video:
        # frames are drawn off screen: SDL (pygame's classic-control renderer) needs no display, and without this
        # looks for one and prints `error: XDG_RUNTIME_DIR is invalid or not set` on a headless machine
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        return EnvAdapter(create_env(cfg.env, cfg, EnvConfig(), render_mode=render_mode), cfg.env_framestack)
    except (EnvNotFoundError, UnsupportedSpaceError) as exc:
        raise ConfigError(f"--env: {exc}", flag="--env") from None


def _make_batched_env(cfg) -> BatchedEnvs:
    """One env object of the run's batched env (`--batched_sampling`), its copies all playing."""
    try:
        return create_batched_envs(cfg.env, cfg, VectorConfig(worker_index=0, num_envs=1, first_env_id=0))
    except (EnvNotFoundError, UnsupportedSpaceError) as exc:
        raise ConfigError(f"--env: {exc}", flag="--env") from None


def load_policy(cfg, info: EnvInfo, device: str, cli_cfg=None):
    """The model of the experiment's `--load_checkpoint_kind` checkpoint, in eval mode, built as training built it
    (by the model factory's functions registered in this process); ConfigError when there is none or it does not fit
    (`cli_cfg`: the command line's flags, named in that error)."""
    model = build_model(cfg, info, device)
    state = _load_policy(cfg, cli_cfg if cli_cfg is not None else cfg, model, device)
    model.eval()
    log.info("loaded policy version %d (%d env frames)", state["version"], state["env_steps"])
    return model


def _load_policy(cfg, cli_cfg, model, device: str) -> dict:
    """The checkpoint's state, its weights in `model`; ConfigError when there is none or it does not fit."""
    checkpoints = CheckpointManager(Path(cfg.train_dir) / cfg.experiment, cfg.policy_index, cfg.keep_checkpoints)
    try:
        state = checkpoints.load(cfg.load_checkpoint_kind, device)
    except CheckpointError as exc:
        raise ConfigError(f"--experiment: {exc}", flag="--experiment") from None
    if state is None:
        raise ConfigError(
            f"--load_checkpoint_kind: no {cfg.load_checkpoint_kind} checkpoint in {checkpoints.dir} "
            f"(--load_checkpoint_kind={cfg.load_checkpoint_kind}; --policy_index={cfg.policy_index})",
            flag="--load_checkpoint_kind",
        )
    mismatch = shape_mismatch(state["model"], model.state_dict())
    if mismatch:
        unregistered = _unregistered_parts(state.get("model_parts"), custom_model_parts(model))
        if unregistered:
            raise ConfigError(_registration_message(checkpoints.dir, unregistered), flag="--experiment")
        raise ConfigError(_mismatch_message(cfg, cli_cfg, checkpoints.dir, mismatch), flag="--env")
    model.load_state_dict(state["model"])
    return state


def shape_mismatch(saved: dict, here: dict) -> list[str]:
    """`name: [64, 4] saved, [64, 6] here` for every tensor whose shape differs or that only one side has."""
    lines = []
    for name in sorted(set(saved) | set(here)):
        a, b = saved.get(name), here.get(name)
        shape_a = list(a.shape) if a is not None else "none"
        shape_b = list(b.shape) if b is not None else "none"
        if shape_a != shape_b:
            lines.append(f"{name}: {shape_a} saved, {shape_b} here")
    return lines


# the registration that makes each kind of part a training run recorded (`custom_model_parts`)
_REGISTRATIONS = {
    "actor-critic": "register_actor_critic_factory",
    "encoder": "register_encoder_factory",
    "core": "register_model_core_factory",
    "decoder": "register_decoder_factory",
}


def _unregistered_parts(saved: list[str] | None, here: list[str]) -> list[str]:
    """The parts the training run registered ("encoder PoolingEncoder") that this process built otherwise; none for
    a checkpoint that does not say (older runs)."""
    return [part for part in saved or [] if part not in here]


def _registration_message(folder: Path, unregistered: list[str]) -> str:
    needed = ", ".join(
        f"global_model_factory().{_REGISTRATIONS[part.split(' ', 1)[0]]}(...) for {part.split(' ', 1)[1]}"
        for part in unregistered
    )
    return (
        f"--experiment: the checkpoint in {folder} was trained with {', '.join(unregistered)}, which this process "
        f"has not registered: call {needed} before loading it, as the training script does (a script that registers "
        "it and calls export_onnx(cfg, path) or enjoy(cfg); docs/customizing.md)"
    )


def _mismatch_message(cfg, cli_cfg, folder: Path, mismatch: list[str]) -> str:
    by_module = {}  # the first differing tensor of each top-level module: the encoder's input, the action head...
    for line in mismatch:
        by_module.setdefault(line.split(".", 1)[0], line)
    shown = list(by_module.values())[:2]
    more = f"; {len(mismatch) - len(shown)} more tensors differ" if len(mismatch) > len(shown) else ""
    what = "; ".join(shown) + more
    trained_on = load_config(Path(cfg.train_dir) / cfg.experiment).env
    if cfg.env != trained_on:
        return (
            f"--env: the checkpoint in {folder} was trained on {trained_on} and does not fit {cfg.env} "
            f"({what}); evaluate it with --env={trained_on}"
        )
    given = sorted(f"--{k}" for k in cli_cfg.cli_args if k not in ("env", "experiment", "train_dir"))
    flags = f"; flags given here that may change it: {', '.join(given)}" if given else ""
    return f"--env: the checkpoint in {folder} does not fit the model built for {cfg.env} ({what}){flags}"


def _play(cfg, cli_cfg, env: EnvAdapter) -> tuple[int, float]:
    episodes_wanted = int(cfg.max_num_episodes) if "max_num_episodes" in cli_cfg.cli_args else DEFAULT_EPISODES
    device = resolve_device(cfg)
    model = load_policy(cfg, EnvInfo(env.obs_spec, env.action_spec, env.reward_scale, env.frameskip), device, cli_cfg)

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
            out = model.policy_step(model.normalize_obs(batch), rnn, deterministic=cfg.eval_deterministic)
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
    return _finish(cfg, cli_cfg, returns, frames)


def _play_batched(cfg, cli_cfg, env: BatchedEnvs) -> int:
    """`_play` for a batched env: every copy of one env object plays, and episodes count in the order they end.
    The video shows what the env's `render()` draws (the first copy, for the tensor and Brax examples)."""
    episodes_wanted = int(cfg.max_num_episodes) if "max_num_episodes" in cli_cfg.cli_args else DEFAULT_EPISODES
    device = resolve_device(cfg)
    model = load_policy(cfg, EnvInfo(env.obs_spec, env.action_spec, env.reward_scale, env.frameskip), device, cli_cfg)
    render = getattr(env.sources[0].env, "render", None) if cfg.save_video else None
    frames: list[np.ndarray] = []
    returns: list[float] = []
    running = np.zeros(env.agents, np.float64)
    ids = np.zeros(1, np.int32)
    obs = env.reset()
    rnn = torch.zeros(env.agents, model.rnn_state_size, device=device) if model.rnn_state_size else None
    total_frames = 0
    with torch.no_grad():
        while len(returns) < episodes_wanted and total_frames < cfg.max_num_frames:
            if render is not None and len(frames) < cfg.video_frames:
                try:
                    frames.append(render())
                except NotImplementedError:
                    log.warning("--save_video: %s draws no frames (no render()), so no video is written", cfg.env)
                    render = None
            batch = {k: torch.as_tensor(v).to(device) for k, v in obs.items()}
            out = model.policy_step(model.normalize_obs(batch), rnn, deterministic=cfg.eval_deterministic)
            rnn = out.new_rnn_states if rnn is not None else None
            step = env.step(ids, out.actions.cpu().numpy())
            obs = step.obs
            running += step.rewards
            total_frames += env.frameskip * env.agents
            ended = np.flatnonzero(step.terminated | step.truncated)
            for k in ended.tolist():
                returns.append(float(running[k]))
                log.info("episode %d: reward %.3f", len(returns), running[k])
            running[ended] = 0.0
            if rnn is not None and len(ended):
                rnn[torch.as_tensor(ended)] = 0.0
    return _finish(cfg, cli_cfg, returns, frames)


def _finish(cfg, cli_cfg, returns: list[float], frames: list[np.ndarray]) -> int:
    """The average, the video and the push to the Hub, after either way of playing."""
    if returns:
        log.info("Avg episode reward: %.3f over %d episodes", float(np.mean(returns)), len(returns))
    video = None
    if cfg.save_video and frames:
        video = save_video(
            frames, Path(cfg.train_dir) / cfg.experiment / (cfg.video_name or "replay.mp4"), cfg.fps or 30
        )
        log.info("video written to %s", video)
    status = push_policy(cfg, cli_cfg.cli_args, returns, video) if cfg.push_to_hub else 0
    return status, float(np.mean(returns)) if returns else math.nan


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


def main(argv: list[str] | None = None) -> int:
    from sf.envs.families import family_of_argv

    argv = sys.argv[1:] if argv is None else list(argv)
    status, _ = enjoy(family_of_argv(argv).cfg_or_exit(argv, evaluation=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
