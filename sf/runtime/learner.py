"""The learner: advantages for a batch, epochs of minibatch PPO updates, weights published after each batch.

The loss itself lives in `sf.algo.ppo_loss`; this module only arranges data for it (reward scaling,
return normalization, chunks of `--recurrence` steps for truncated BPTT) and runs the optimizer.

Between two iterations a learner takes what a layer above the runner (population-based training, `sf.pbt`) sends
through it: its own hyperparameters (`Hyperparameters`), a checkpoint of its weights for another policy to take
(`ShareWeights`), or another policy's weights and optimizer state to train on from (`AdoptWeights`). Each learner
keeps its own copy of the config, so a policy's hyperparameters are its own in a serial run too.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from pathlib import Path

import torch
from torch import nn

from sf.algo.gae import compute_gae
from sf.algo.lr_schedule import LearningRateSchedule
from sf.algo.ppo_loss import LossCoefficients, LossInputs, ppo_losses
from sf.algo.vtrace import compute_vtrace
from sf.experiment.checkpoint import CheckpointError, CheckpointManager, load_state
from sf.profiling import staleness
from sf.runtime.event_loop import Component
from sf.runtime.messages import (
    AdoptWeights,
    Hyperparameters,
    LearnerStats,
    LearnerVersion,
    PolicyVersion,
    Save,
    SaveBest,
    ShareWeights,
    Staleness,
    Train,
    WeightsAdopted,
    WeightsSaved,
)
from sf.utils.roles import RUNNER, Role, batcher_name, learner_name, rollout_worker_name

log = logging.getLogger("sf")

# the flags a learner takes per policy between iterations (`Hyperparameters`): Sample Factory's PBT set, Adam's
# betas and epsilon, and the discount factor
PER_POLICY_HYPERPARAMETERS = (
    "learning_rate",
    "exploration_loss_coeff",
    "value_loss_coeff",
    "max_grad_norm",
    "ppo_clip_ratio",
    "ppo_clip_value",
    "adam_beta1",
    "adam_beta2",
    "adam_eps",
    "gamma",
)


class Learner(Component):
    role = Role.LEARNER
    wait_key = "wait_batch"
    iteration_kind = Train  # the message whose handling is one training iteration (profiling's step boundaries)

    def __init__(
        self,
        cfg,
        policy_id: int,
        model: nn.Module,
        policy_store,
        device: str,
        checkpoints: CheckpointManager,
        reward_scale: float,
        resume_from: Path | None = None,
    ):
        super().__init__(learner_name(policy_id))
        self.cfg = copy.copy(cfg)  # its hyperparameters may become its own (`Hyperparameters`)
        self.policy_id = policy_id
        self.model = model
        self.store = policy_store
        self.device = torch.device(device)
        self.checkpoints = checkpoints
        self.resume_from = resume_from  # the checkpoint the main process chose (sf.experiment.resume)
        self.reward_scale = cfg.reward_scale * reward_scale
        self.env_steps = 0
        self.version = 0
        self.own_since = 0  # the first version trained from the weights it holds (`AdoptWeights` moves it)
        self.sgd_steps = 0  # optimizer steps over the whole run: the clock of --lr_schedule=linear_decay
        self.lr_schedule = LearningRateSchedule(cfg)

    def on_start(self) -> None:
        with self.timing.add_time("init"):
            self._init()

    def _init(self) -> None:
        cfg = self.cfg
        params = list(self.model.parameters())
        self.optimizer = torch.optim.Adam(
            params, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps
        )
        self.checkpoints.remove_stale()
        state = load_state(self.resume_from) if self.resume_from is not None else None
        if state is not None:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.env_steps, self.version = state["env_steps"], state["version"]
            # checkpoints from before the count was kept: every iteration took the configured number of steps
            self.sgd_steps = state.get("sgd_steps", self.version * cfg.num_epochs * cfg.num_batches_per_epoch)
            self.checkpoints.best_value = state.get("best_performance", self.checkpoints.best_value)
            self.lr_schedule.lr = state.get("lr", self.lr_schedule.lr)  # a KL-adaptive rate carries on where it was
            log.info(
                "%s resumed from policy version %d (%d env frames), %s",
                self.name,
                self.version,
                self.env_steps,
                self.resume_from,
            )
        self._set_lr(self.lr_schedule.value(self.sgd_steps))
        self.store.publish(self.model, self.version)
        self.send(batcher_name(self.policy_id), LearnerVersion(self.version))
        self.send(RUNNER, LearnerStats(self.policy_id, self.env_steps, self.version, {}))

    def _on_train(self, msg: Train) -> None:
        received = time.monotonic()
        batch, dropped = msg.batch, msg.dropped
        self.env_steps += msg.new_frames
        if self.cfg.sampling_only:
            self._discard(dropped)
            return
        with self.model.parts_timed_by(self.timing):  # a part a user registered is a row of this tree
            with self.timing.add_time("prepare_batch"):
                data = self._prepare(batch)
            with self.timing.add_time("train"):
                stats = self._train(data)
        with self.timing.add_time("after_optimizer"):
            self.version += 1
            self.store.publish(self.model, self.version)
            self.send(batcher_name(self.policy_id), LearnerVersion(self.version))
            if not self.cfg.async_rl:
                for w in range(self.cfg.num_workers):
                    self.send(rollout_worker_name(w), PolicyVersion(self.policy_id, self.version))
        lag = self._own_lags(batch["policy_version"])
        stats["policy_lag"] = float(lag.mean()) if lag.numel() else math.nan
        stats["policy_lag_max"] = float(lag.max()) if lag.numel() else math.nan
        with self.timing.add_time("staleness"):  # batches built by hand (tests) carry no trajectory stamps
            ages = staleness.step_ages(batch["traj_time"], self.cfg.rollout, received) if "traj_time" in batch else None
            age_counts = staleness.age_counts(ages) if ages is not None else {}
            self.send(RUNNER, Staleness(self.policy_id, age_counts, staleness.lag_counts(lag)))
        stats["dropped_trajectories"] = float(dropped)
        stats["valids_fraction"] = float(data["valids"].float().mean())
        stats["lr"] = self.lr
        self.send(RUNNER, LearnerStats(self.policy_id, self.env_steps, self.version, stats))

    def _own_lags(self, versions: torch.Tensor) -> torch.Tensor:
        """Versions behind the weights just trained, of every step collected with these weights: the steps collected
        before weights were adopted (masked out of the loss) lag another policy's weights, not these."""
        versions = versions.reshape(-1)
        if self.own_since:
            versions = versions[versions >= self.own_since]
        return (self.version - 1 - versions).float()

    def _discard(self, dropped: int) -> None:
        """--sampling_only: count the batch's frames and drop it. Synchronous collection waits for a version
        signal before its next round, so that still goes out; the weights never change, so nothing is published."""
        if not self.cfg.async_rl:
            self.version += 1
            for w in range(self.cfg.num_workers):
                self.send(rollout_worker_name(w), PolicyVersion(self.policy_id, self.version))
        stats = {"policy_lag": 0.0, "policy_lag_max": 0.0, "dropped_trajectories": float(dropped)}
        self.send(RUNNER, LearnerStats(self.policy_id, self.env_steps, self.version, stats))

    # data ------------------------------------------------------------------------------------------------
    def _prepare(self, batch: dict) -> dict:
        """Flat [n * T] training tensors from a batch of n trajectories.

        A step is valid when the policy that acted is fewer than `--max_policy_lag` versions behind the learner
        now and, in a multi-agent env, the agent was active; invalid steps take no part in any loss. The bootstrap
        value after the last step is recomputed with the current weights, and values are denormalized before GAE,
        as Sample Factory does.
        """
        cfg, dev, model = self.cfg, self.device, self.model
        T = cfg.rollout
        to = (lambda x: x.to(dev, non_blocking=True)) if dev.type != "cpu" else (lambda x: x)
        obs = {k: to(v) for k, v in batch["obs"].items()}
        n = next(iter(obs.values())).shape[0]
        flat_obs = {k: v[:, :T].reshape(n * T, *v.shape[2:]) for k, v in obs.items()}
        model.obs_normalizer.update(flat_obs)

        valids = (self.version - to(batch["policy_version"])) < cfg.max_policy_lag
        if "active" in batch:  # a multi-agent env's inactive agents, masked as Sample Factory does
            valids &= to(batch["active"])
        rnn_states = to(batch["rnn_states"])
        values = to(batch["values"]).clone()
        values[:, T] = self._current_values({k: v[:, T] for k, v in obs.items()}, rnn_states[:, T])

        dones = to(batch["dones"])
        rewards = to(batch["rewards"]) * self.reward_scale
        rewards = rewards.clamp(-cfg.reward_clip, cfg.reward_clip)
        if cfg.value_bootstrap:
            rewards = rewards + cfg.gamma * values[:, :T] * to(batch["time_outs"]) * dones
        gae_valids = torch.cat([valids, valids[:, -1:]], dim=1)  # the bootstrap step is as valid as the last one
        advantages, returns = compute_gae(rewards, dones, values, cfg.gamma, cfg.gae_lambda, gae_valids)

        old_values = values[:, :T]
        normalizer = model.returns_normalizer
        if normalizer is not None:
            normalizer.update(returns[valids])
            returns = normalizer.normalize(returns)
            old_values = normalizer.normalize(old_values)
        return {
            "obs": flat_obs,
            "rnn_states": rnn_states[:, :T],
            "actions": to(batch["actions"]).reshape(n * T, -1),
            "old_log_prob": to(batch["log_prob"]).reshape(-1),
            "old_action_logits": to(batch["action_logits"]).reshape(n * T, -1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "old_values": old_values.reshape(-1),
            "valids": valids.reshape(-1),
            "rewards": rewards,
            "dones": dones,
            "bootstrap_values": values[:, T],
            "n": n,
        }

    @torch.no_grad()
    def _current_values(self, last_obs: dict[str, torch.Tensor], rnn_states: torch.Tensor) -> torch.Tensor:
        """V(s_T) in return space under the current weights and observation statistics."""
        model = self.model
        core, _ = model.forward_core(
            model.forward_head(model.normalize_obs(last_obs)), rnn_states if model.rnn_state_size > 0 else None
        )
        _, values = model.forward_tail(core)
        if model.returns_normalizer is not None:
            values = model.returns_normalizer.denormalize(values)
        return values

    # training --------------------------------------------------------------------------------------------
    def _train(self, data: dict) -> dict:
        cfg = self.cfg
        T = cfg.rollout
        chunk = T if cfg.with_vtrace else cfg.recurrence
        num_chunks = data["n"] * T // chunk
        chunks_per_mb = max(1, cfg.batch_size // chunk)
        valid_fraction = float(data["valids"].float().mean())
        if valid_fraction == 0.0:
            log.warning(
                "%s: every step of this batch is older than --max_policy_lag=%d versions (or collected before the "
                "policy took another's weights) or of an inactive agent; skipped",
                self.name,
                cfg.max_policy_lag,
            )
            return {}
        stats: dict[str, float] = {}
        kls: list[float] = []
        for _ in range(cfg.num_epochs):
            order = (
                torch.randperm(num_chunks, device=self.device)
                if cfg.shuffle_minibatches
                else torch.arange(num_chunks, device=self.device)
            )
            epoch_kls = []
            for mb in range(math.ceil(num_chunks / chunks_per_mb)):
                chunk_ids = order[mb * chunks_per_mb : (mb + 1) * chunks_per_mb]
                with self.timing.add_time("calculate_losses"):
                    losses = self._losses(data, chunk_ids, chunk)
                with self.timing.add_time("update"):
                    self.optimizer.zero_grad(set_to_none=True)
                    losses["total_loss"].backward()
                    with self.timing.add_time("clip"):
                        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")  # 0: no clipping
                        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                    self._apply_lr(self.lr * valid_fraction)  # masked data: a proportionally smaller step
                    self.optimizer.step()
                self.sgd_steps += 1
                epoch_kls.append(float(losses["kl_divergence"]))
                if self.lr_schedule.per_sgd_step:
                    self.lr = self.lr_schedule.value(self.sgd_steps, epoch_kls[-1])
            if cfg.lr_schedule == "kl_adaptive_epoch":
                self.lr = self.lr_schedule.value(self.sgd_steps, sum(epoch_kls) / len(epoch_kls))
            kls += epoch_kls
        with self.timing.add_time("losses_postprocess"):
            for key, value in losses.items():
                stats[key] = float(value.detach())
            stats["grad_norm"] = float(grad_norm)
            stats.update(self.model.summaries())
            stats["kl_divergence"] = sum(kls) / len(kls)
        return stats

    def _set_lr(self, lr: float) -> None:
        self.lr = lr
        self._apply_lr(lr)

    def _apply_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _losses(self, data: dict, chunk_ids: torch.Tensor, chunk: int) -> dict:
        """Forward the chosen chunks of `chunk` consecutive steps and compute the PPO losses on them."""
        inputs = self._loss_inputs(data, chunk_ids, chunk)
        with self.timing.add_time("losses"):
            return ppo_losses(inputs, self._coefficients())

    def _coefficients(self) -> LossCoefficients:
        cfg = self.cfg
        return LossCoefficients(
            clip_ratio=cfg.ppo_clip_ratio,
            clip_value=cfg.ppo_clip_value,
            value_loss_coeff=cfg.value_loss_coeff,
            exploration_loss_coeff=cfg.exploration_loss_coeff,
            kl_loss_coeff=cfg.kl_loss_coeff,
        )

    def _loss_inputs(self, data: dict, chunk_ids: torch.Tensor, chunk: int) -> LossInputs:
        """The per-sample tensors the loss takes, for the chosen chunks: the model's forward pass and the targets."""
        cfg, model = self.cfg, self.model
        steps = (chunk_ids.unsqueeze(1) * chunk + torch.arange(chunk, device=chunk_ids.device)).reshape(-1)
        whole_batch = steps.numel() == data["n"] * cfg.rollout and not cfg.shuffle_minibatches
        valids = data["valids"].index_select(0, steps)
        with self.timing.add_time("forward_head"):
            obs = data["obs"] if whole_batch else {k: v.index_select(0, steps) for k, v in data["obs"].items()}
            head = model.forward_head(model.normalize_obs(obs))
        with self.timing.add_time("bptt"):
            if model.rnn_state_size > 0:
                n_mb = chunk_ids.numel()
                rnn = data["rnn_states"].reshape(-1, data["rnn_states"].shape[-1])
                h0 = rnn.index_select(0, chunk_ids * chunk)
                # an invalid step also cuts the sequence, so no gradient flows through experience that is masked
                resets = data["dones"].reshape(-1).index_select(0, steps).bool() | ~valids
                core = model.forward_core_seq(head.view(n_mb, chunk, -1), h0, resets.float().view(n_mb, chunk))
                core = core.reshape(n_mb * chunk, -1)
            else:
                core, _ = model.forward_core(head, None)
        with self.timing.add_time("tail"):
            logits, values = model.forward_tail(core)
            dist = model.action_distribution(logits)
            log_prob = dist.log_prob(data["actions"].index_select(0, steps))
            entropy = dist.entropy()
            behaviour = model.action_distribution(data["old_action_logits"].index_select(0, steps))
            kl_to_behaviour = dist.kl(behaviour)
            uniform_kl = dist.symmetric_kl_to_uniform() if cfg.exploration_loss == "symmetric_kl" else None
        with self.timing.add_time("advantages_returns"):
            old_log_prob = data["old_log_prob"].index_select(0, steps)
            if cfg.with_vtrace:
                advantages, returns = self._vtrace(data, chunk_ids, values, log_prob, old_log_prob)
            else:
                advantages = data["advantages"].index_select(0, steps)
                returns = data["returns"].index_select(0, steps)
        return LossInputs(
            log_prob=log_prob,
            old_log_prob=old_log_prob,
            advantages=advantages,
            values=values,
            old_values=data["old_values"].index_select(0, steps),
            returns=returns,
            entropy=entropy,
            kl_to_behaviour=kl_to_behaviour,
            uniform_kl=uniform_kl,
            valids=None if bool(valids.all()) else valids,
        )

    def _vtrace(self, data, traj_ids, values, log_prob, old_log_prob):
        """V-trace targets over whole trajectories with the current critic (values are in normalized space)."""
        cfg, T = self.cfg, self.cfg.rollout
        n_mb = traj_ids.numel()
        normalizer = self.model.returns_normalizer
        cur = values.detach().view(n_mb, T)
        boot = data["bootstrap_values"].index_select(0, traj_ids)
        if normalizer is not None:
            cur = normalizer.denormalize(cur)
        all_values = torch.cat([cur, boot.unsqueeze(1)], dim=1)
        log_rhos = (log_prob - old_log_prob).detach().view(n_mb, T)
        vs, pg_adv = compute_vtrace(
            data["rewards"].index_select(0, traj_ids),
            data["dones"].index_select(0, traj_ids),
            all_values,
            log_rhos,
            cfg.gamma,
            cfg.vtrace_rho,
            cfg.vtrace_c,
        )
        if normalizer is not None:
            vs = normalizer.normalize(vs)
        return pg_adv.reshape(-1), vs.reshape(-1)

    def _state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "env_steps": self.env_steps,
            "version": self.version,
            "sgd_steps": self.sgd_steps,
            "best_performance": self.checkpoints.best_value,
            "lr": self.lr,
        }

    def _on_save(self, msg: Save) -> None:
        self.save()

    def _on_save_best(self, msg: SaveBest) -> None:
        self.save_best(msg.metric, msg.value)

    def save(self) -> None:
        with self.timing.add_time("save_checkpoint"):
            self.checkpoints.save(self._state(), self.version, self.env_steps)

    def save_best(self, metric: str, value: float) -> None:
        """The runner's average of `metric`: kept as the best policy when it beats the best so far."""
        with self.timing.add_time("save_checkpoint"):
            path = self.checkpoints.save_if_best(self._state(), self.version, self.env_steps, metric, value)
        if path is not None:
            log.info("%s: new best policy, %s=%.3f, saved as %s", self.name, metric, value, path.name)

    # what a layer above the runner drives (population-based training) ------------------------------------------
    def _on_hyperparameters(self, msg: Hyperparameters) -> None:
        with self.timing.add_time("hyperparameters"):
            self.set_hyperparameters(msg.values)

    def set_hyperparameters(self, values: dict) -> None:
        """Train with these values from the next iteration on: the losses and GAE read them from this learner's
        config, Adam's from its parameter groups, the learning rate from its schedule (`set_base`)."""
        unknown = sorted(set(values) - set(PER_POLICY_HYPERPARAMETERS))
        if unknown:
            raise ValueError(f"{self.name}: not a per-policy hyperparameter: {', '.join(unknown)}")
        for key, value in values.items():
            setattr(self.cfg, key, value)
        for group in self.optimizer.param_groups:
            group["betas"] = (self.cfg.adam_beta1, self.cfg.adam_beta2)
            group["eps"] = self.cfg.adam_eps
        if "learning_rate" in values:
            self.lr_schedule.set_base(values["learning_rate"])
            self._set_lr(self.lr_schedule.value(self.sgd_steps))

    def _on_share_weights(self, msg: ShareWeights) -> None:
        with self.timing.add_time("save_checkpoint"):
            path = self.checkpoints.save(self._state(), self.version, self.env_steps)
        self.send(RUNNER, WeightsSaved(self.policy_id, str(path), self.version))

    def _on_adopt_weights(self, msg: AdoptWeights) -> None:
        """Train on from another policy's weights and optimizer state, keeping this policy's frames and best value.
        The version jumps past `--max_policy_lag`, so the batcher drops and the loss masks all experience collected
        with the old weights (Sample Factory's rule); a checkpoint of the adopted weights is saved at once."""
        with self.timing.add_time("adopt_weights"):
            try:
                state = load_state(Path(msg.path))
            except CheckpointError as exc:
                log.warning("%s keeps its own weights: %s", self.name, exc)
                self.send(RUNNER, WeightsAdopted(self.policy_id, msg.source, self.version, str(exc)))
                return
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.lr_schedule.lr = state.get("lr", self.lr_schedule.lr)
            self.version += self.cfg.max_policy_lag + 1
            self.own_since = self.version
            self.set_hyperparameters(msg.hyperparameters)
            self.store.publish(self.model, self.version)
            self.send(batcher_name(self.policy_id), LearnerVersion(self.version))
            if not self.cfg.async_rl:
                for w in range(self.cfg.num_workers):
                    self.send(rollout_worker_name(w), PolicyVersion(self.policy_id, self.version))
        self.save()
        self.send(RUNNER, WeightsAdopted(self.policy_id, msg.source, self.version, None))

    def on_stop(self) -> None:
        """A final checkpoint, except in benchmark mode where only throughput matters (or when nothing trained)."""
        if hasattr(self, "optimizer") and not (self.cfg.benchmark or self.cfg.sampling_only):
            self.save()
