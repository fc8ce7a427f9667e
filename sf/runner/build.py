"""How a run's components are built, the same way for every placement: the env's spaces, the model, the buffers,
then `build_components`, which makes the components of one kind (a learner with its batcher, an inference worker, a
rollout worker with the inference workers it holds) from `ComponentInputs`. The serial placement calls it for every
component on its one loop, the parallel one in each component process, a Ray node's agent in each of its processes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from sf.envs import EnvConfig
from sf.envs.batched import create_batched_envs
from sf.envs.multi_agent import MultiAgentAdapter, open_env
from sf.envs.registry import create_vector_env
from sf.envs.spaces import EnvInfo
from sf.envs.training_info import default_reward_shaping
from sf.envs.vector import VectorConfig
from sf.experiment.checkpoint import CheckpointManager
from sf.model import create_actor_critic
from sf.model.precision import PrecisionChoice, choose_precision
from sf.runtime.batcher import Batcher
from sf.runtime.buffers import BufferLayout, TrajectoryBuffers, make_layout, trajectories_per_batch
from sf.runtime.event_loop import Component
from sf.runtime.inference_worker import InferenceWorker
from sf.runtime.learner import Learner
from sf.runtime.multi_agent_worker import MultiAgentRolloutWorker
from sf.runtime.rollout_worker import RolloutWorker
from sf.supervision.incarnations import WorkerIncarnations
from sf.supervision.shm_names import Ledger
from sf.utils.errors import ConfigError
from sf.utils.roles import policy_queue_name


def probe_env(cfg) -> EnvInfo:
    """Open one env to learn its spaces; a missing env, an unsupported space or a flag the action space cannot
    honour fails here, before any process starts. With `--envpool` the env is a vector env of one; with
    `--batched_sampling` one env object, whose copies count as agents (a slot each)."""
    if cfg.batched_sampling:
        return _probe_batched(cfg)
    if cfg.envpool:
        env = create_vector_env(cfg.env, cfg, VectorConfig(worker_index=-1, num_envs=1, first_env_id=0))
    else:
        env = open_env(cfg, EnvConfig(worker_index=-1, vector_index=0, env_id=-1))
    try:
        shaping = default_reward_shaping(getattr(env, "env", None))
        info = EnvInfo(
            env.obs_spec, env.action_spec, float(env.reward_scale), int(env.frameskip), reward_shaping=shaping
        )
        if isinstance(env, MultiAgentAdapter):
            info = replace(info, num_agents=env.num_agents, is_multiagent=True)
    finally:
        env.close()
    if info.is_multiagent:
        _check_multi_agent(cfg, info.num_agents)
    if cfg.exploration_loss == "symmetric_kl" and info.action_spec.continuous_dim:
        raise ConfigError(
            "--exploration_loss=symmetric_kl needs a purely categorical action space; "
            f"{cfg.env} has {info.action_spec.continuous_dim} continuous action dimensions (use entropy)",
            flag="--exploration_loss",
        )
    return info


def _probe_batched(cfg) -> EnvInfo:
    env = create_batched_envs(cfg.env, cfg, VectorConfig(worker_index=-1, num_envs=1, first_env_id=0))
    try:
        info = EnvInfo(env.obs_spec, env.action_spec, env.reward_scale, env.frameskip, num_agents=env.agents)
    finally:
        env.close()
    _check_multi_agent(cfg, info.num_agents)
    return info


def _check_multi_agent(cfg, num_agents: int) -> None:
    """What a multi-agent env cannot run with, said before anything starts."""
    per_version = trajectories_per_batch(cfg)
    if not cfg.async_rl and per_version % num_agents:
        raise ConfigError(
            f"--async_rl=False trains on whole rounds of an env's {num_agents} agents (copies of a batched env): "
            f"--batch_size * --num_batches_per_epoch / --rollout ({per_version} trajectories) must be a multiple of "
            f"{num_agents}",
            flag="--batch_size",
        )


def build_model(cfg, env_info: EnvInfo, device: str, seed_offset: int = 0):
    if cfg.seed is not None:
        torch.manual_seed(cfg.seed + seed_offset)
    return create_actor_critic(env_info.obs_spec, env_info.action_spec, cfg).to(device)


# At or above this size a CPU forward pass is dominated by reading the weights (about 4 MB and up), so a shared
# inference worker that batches several workers' requests per read pays for its messages (the Doom suite's 2.9M
# parameters: 11 % fewer frames per second with inference in the rollout workers); below it the fixed cost of a
# call dominates and the messages and process switches around it are the larger cost (CartPole's 4.7k: +60 %).
COLOCATE_MAX_PARAMS = 1_000_000


def resolve_inference_placement(cfg, device: str, model) -> str:
    """`--inference_placement` made concrete for a parallel run: "own_process" or "rollout_worker"."""
    if cfg.inference_placement != "auto":
        return cfg.inference_placement
    small = sum(p.numel() for p in model.parameters()) < COLOCATE_MAX_PARAMS
    one_worker = cfg.policy_workers_per_policy == 1
    return "rollout_worker" if device == "cpu" and small and one_worker else "own_process"


def build_buffers(cfg, env_info: EnvInfo, rnn_state_size: int, shared: bool) -> TrajectoryBuffers:
    return TrajectoryBuffers(layout_of(cfg, env_info, rnn_state_size), shared=shared)


def layout_of(cfg, env_info: EnvInfo, rnn_state_size: int) -> BufferLayout:
    """The buffers' layout for the env: a multi-agent env has a row per agent and the agents' activity."""
    return make_layout(
        cfg,
        env_info.obs_spec,
        env_info.action_spec,
        rnn_state_size,
        agents_per_env=env_info.num_agents,
        multi_agent=env_info.is_multiagent,
    )


def has_image_encoder(env_info: EnvInfo) -> bool:
    return any(len(shape) == 3 for shape, _ in env_info.obs_spec.values())


def precision_choice(cfg, env_info: EnvInfo, device: str) -> PrecisionChoice:
    """What `cfg.precision` (the request, which travels to every process and node) resolves to on this machine."""
    return choose_precision(cfg.precision, device, has_image_encoder(env_info))


def make_rollout_worker(cfg, worker_idx: int, buffers: TrajectoryBuffers, *args, **kwargs) -> RolloutWorker:
    """The rollout worker for the env the buffers were laid out for: one agent per env, or several (the rest of the
    arguments are `RolloutWorker`'s)."""
    kind = MultiAgentRolloutWorker if buffers.layout.multi_agent else RolloutWorker
    return kind(cfg, worker_idx, buffers, *args, **kwargs)


@dataclass
class ComponentInputs:
    """What building a component takes, whatever the placement. `model_for(policy)` gives the policy's model in this
    process (one shared by learner and inference in a serial run, a new one per process in a parallel run)."""

    cfg: Any
    env_info: EnvInfo
    device: str
    colocated: bool  # inference workers live in the rollout workers' processes
    buffers: TrajectoryBuffers
    stores: list  # each policy's store (`sf.runtime.policy_store`)
    model_for: Callable[[int], Any]
    experiment_dir: str | Path = ""
    ledger: Ledger | None = None
    resume: dict[int, Path] = field(default_factory=dict)  # the checkpoint each policy continues from
    incarnations: WorkerIncarnations | None = None  # each rollout worker's life, where components can be restarted


Built = list[tuple[Component, tuple[str, ...]]]  # components with the names (aliases) they also answer to


def build_components(kind: str, a: int, b: int | None, inputs: ComponentInputs) -> Built:
    """The components of one kind: "learner" (policy `a`'s learner and batcher), "inference" (policy `a`'s inference
    worker `b`), "rollout" (rollout worker `a`, with an inference worker per policy when inference is colocated)."""
    cfg = inputs.cfg
    if kind == "learner":
        checkpoints = CheckpointManager(inputs.experiment_dir, a, cfg.keep_checkpoints, cfg.save_milestones_sec)
        model, store = inputs.model_for(a), inputs.stores[a]
        learner = Learner(
            cfg, a, model, store, inputs.device, checkpoints, inputs.env_info.reward_scale, inputs.resume.get(a)
        )
        return [(learner, ()), (Batcher(cfg, a, inputs.buffers, inputs.env_info.frameskip, inputs.incarnations), ())]
    if kind == "inference":
        return [(_inference_worker(inputs, a, b), (policy_queue_name(a),))]
    versions = [store.version for store in inputs.stores]
    incarnation = int(inputs.incarnations.of[a]) if inputs.incarnations is not None else 0
    worker = make_rollout_worker(cfg, a, inputs.buffers, inputs.ledger, incarnation, versions)
    built: Built = [(worker, ())]
    if inputs.colocated:
        built += [(_inference_worker(inputs, p, a), (policy_queue_name(p),)) for p in range(cfg.num_policies)]
    return built


def _inference_worker(inputs: ComponentInputs, policy: int, index: int) -> InferenceWorker:
    model, store = inputs.model_for(policy), inputs.stores[policy]
    return InferenceWorker(inputs.cfg, policy, index, inputs.buffers, model, store, inputs.device, inputs.incarnations)
