"""The learner on hand-built batches: batch preparation (validity, bootstrap value, GAE) and the loss for GAE and
V-trace, recurrent and not, against the same quantities computed step by step with torch.distributions; masking
of stale experience; the KL-adaptive learning rate across a resume."""

from __future__ import annotations

import math
import queue

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from sf.cfg.arguments import parse_full_cfg
from sf.envs.spaces import ActionSpec
from sf.experiment.checkpoint import CheckpointManager
from sf.model import create_actor_critic
from sf.runtime.event_loop import EventLoop
from sf.runtime.learner import Learner
from sf.runtime.messages import Train
from sf.runtime.policy_store import LocalPolicyStore
from sf.utils.roles import RUNNER, batcher_name

torch.set_num_threads(1)

N, T, OBS_DIM = 4, 4, 3
OBS_SPEC = {"obs": ((OBS_DIM,), np.dtype(np.float32))}
ACTION_SPEC = ActionSpec((3,), 1)  # a categorical choice of 3 and one Gaussian component
GAMMA, LAMBDA = 0.9, 0.8


def make_cfg(tmp_path, *flags: str):
    return parse_full_cfg(
        [
            "--env=hand_built",
            f"--train_dir={tmp_path}",
            "--experiment=learner",
            f"--rollout={T}",
            f"--batch_size={N * T}",
            "--num_batches_per_epoch=1",
            "--num_epochs=1",
            "--encoder_mlp_layers",
            "8",
            "--rnn_size=6",
            f"--gamma={GAMMA}",
            f"--gae_lambda={LAMBDA}",
            "--normalize_input=False",
            "--normalize_returns=False",
            "--shuffle_minibatches=False",
            "--max_grad_norm=0",
            "--seed=0",
            *flags,
        ]
    )


def make_learner(cfg, tmp_path, resume: bool = False) -> Learner:
    """A learner of policy 0 saving under `tmp_path`; with `resume`, continuing from its newest checkpoint."""
    torch.manual_seed(0)
    model = create_actor_critic(OBS_SPEC, ACTION_SPEC, cfg)
    checkpoints = CheckpointManager(tmp_path / "ckpt", 0, keep=2)
    resume_from = checkpoints.newest().path if resume else None
    learner = Learner(cfg, 0, model, LocalPolicyStore(), "cpu", checkpoints, 1.0, resume_from)
    loop = EventLoop(routes={RUNNER: queue.Queue(), batcher_name(0): queue.Queue()})
    loop.add(learner)
    learner.on_start()
    return learner


def hand_built_batch(model, seed: int = 1, versions: tuple = (0, 0, 0, 0)) -> dict:
    """Trajectories as the rollout stores them: T steps plus the bootstrap observation, behaviour parameters a
    perturbation of the current policy's, one episode end and one time-limit truncation."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(N, T + 1, OBS_DIM, generator=gen)
    rnn_states = torch.randn(N, T + 1, model.rnn_state_size, generator=gen) * 0.5
    with torch.no_grad():
        flat = obs[:, :T].reshape(-1, OBS_DIM)
        core, _ = model.forward_core(
            model.forward_head({"obs": flat}), rnn_states[:, :T].reshape(N * T, -1) if model.rnn_state_size else None
        )
        logits, _ = model.forward_tail(core)
    behaviour = logits + 0.3 * torch.randn(logits.shape, generator=gen)
    actions = torch.stack([torch.randint(0, 3, (N * T,), generator=gen).float(), torch.randn(N * T, generator=gen)], 1)
    dones = torch.zeros(N, T)
    dones[0, 1] = dones[2, 3] = 1.0
    time_outs = torch.zeros(N, T)
    time_outs[2, 3] = 1.0
    return {
        "obs": {"obs": obs},
        "rnn_states": rnn_states,
        "values": torch.randn(N, T + 1, generator=gen),
        "actions": actions.view(N, T, 2),
        "log_prob": behaviour_log_prob(behaviour, actions).view(N, T),
        "action_logits": behaviour.view(N, T, -1),
        "rewards": torch.randn(N, T, generator=gen),
        "dones": dones,
        "time_outs": time_outs,
        "policy_version": policy_versions(versions),
    }


def policy_versions(versions: tuple) -> torch.Tensor:
    """[N, T] from one version per trajectory, or per step where an entry is a tuple."""
    rows = [v if isinstance(v, tuple) else (v,) * T for v in versions]
    return torch.tensor(rows, dtype=torch.int32)


def dists(params: torch.Tensor) -> tuple[Categorical, Normal]:
    """The policy over ACTION_SPEC as torch.distributions: logits, mean, log std."""
    return Categorical(logits=params[:, :3]), Normal(params[:, 3], params[:, 4].exp())


def behaviour_log_prob(params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    cat, normal = dists(params)
    return cat.log_prob(actions[:, 0].long()) + normal.log_prob(actions[:, 1])


def gae_by_hand(rewards, dones, values, valids) -> torch.Tensor:
    """Sample Factory's masked GAE, one step at a time."""
    adv = torch.zeros(N, T)
    for i in range(N):
        last = 0.0
        for t in reversed(range(T)):
            v_next_valid = float(valids[i, min(t + 1, T - 1)])
            delta = (rewards[i, t] - values[i, t]) * valids[i, t] + GAMMA * values[i, t + 1] * v_next_valid * (
                1 - dones[i, t]
            )
            discount = GAMMA * LAMBDA if valids[i, t] else 1.0
            last = delta + discount * (1 - dones[i, t]) * last
            adv[i, t] = last
    return adv


def vtrace_by_hand(rewards, dones, values, log_rhos):
    vs, adv = torch.zeros(N, T), torch.zeros(N, T)
    for i in range(N):
        vs_next = values[i, T]
        for t in reversed(range(T)):
            rho = min(1.0, math.exp(log_rhos[i, t]))
            disc = GAMMA * (1 - dones[i, t])
            v, v_next = values[i, t], values[i, t + 1]
            adv[i, t] = rho * (rewards[i, t] + disc * vs_next - v)
            vs[i, t] = v + rho * (rewards[i, t] + disc * v_next - v) + disc * rho * (vs_next - v_next)
            vs_next = vs[i, t]
    return vs, adv


def current_outputs(model, obs: torch.Tensor, rnn_states: torch.Tensor, resets: torch.Tensor):
    """Policy parameters and values for every step, running the core one step at a time (state zeroed after a
    reset) from each trajectory's first stored state."""
    params, values = [], []
    h = rnn_states[:, 0] if model.rnn_state_size else None
    for t in range(T):
        core, h_next = model.forward_core(model.forward_head({"obs": obs[:, t]}), h)
        p, v = model.forward_tail(core)
        params.append(p)
        values.append(v)
        if h is not None:
            h = h_next * (1.0 - resets[:, t]).unsqueeze(1)
    return torch.stack(params, 1).reshape(N * T, -1), torch.stack(values, 1).reshape(-1)


def sf_loss_by_hand(cfg, params, values, batch, advantages, returns, old_values, valids):
    """Sample Factory 2.1.1's loss terms, written out over the valid samples."""
    actions = batch["actions"].reshape(N * T, 2)
    cat, normal = dists(params)
    old_cat, old_normal = dists(batch["action_logits"].reshape(N * T, -1))
    log_prob = cat.log_prob(actions[:, 0].long()) + normal.log_prob(actions[:, 1])
    ratio = (log_prob - batch["log_prob"].reshape(-1)).exp().clamp(0.05, 20.0)[valids]
    adv = advantages[valids]
    adv = (adv - adv.mean()) / adv.std()
    high = 1.0 + cfg.ppo_clip_ratio
    policy_loss = -torch.min(ratio * adv, ratio.clamp(1.0 / high, high) * adv).mean()
    v, v_old, ret = values[valids], old_values[valids], returns[valids]
    v_clipped = v_old + (v - v_old).clamp(-cfg.ppo_clip_value, cfg.ppo_clip_value)
    value_loss = cfg.value_loss_coeff * torch.max((v - ret) ** 2, (v_clipped - ret) ** 2).mean()
    entropy = (cat.entropy() + normal.entropy())[valids]
    kl = torch.distributions.kl_divergence(cat, old_cat) + torch.distributions.kl_divergence(normal, old_normal)
    kl = kl[valids].mean()
    return {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "exploration_loss": -cfg.exploration_loss_coeff * entropy.mean(),
        "kl_loss": cfg.kl_loss_coeff * kl,
        "kl_divergence": kl,
    }


@pytest.mark.parametrize("use_rnn", [False, True], ids=["mlp", "gru"])
@pytest.mark.parametrize("vtrace", [False, True], ids=["gae", "vtrace"])
def test_prepare_and_loss_match_hand_computation(tmp_path, use_rnn, vtrace):
    cfg = make_cfg(
        tmp_path,
        f"--use_rnn={use_rnn}",
        f"--with_vtrace={vtrace}",
        "--max_policy_lag=3",
        "--kl_loss_coeff=0.7",
        "--value_bootstrap=True",
        "--ppo_clip_value=0.3",
    )
    learner = make_learner(cfg, tmp_path)
    learner.version = 4  # trajectory 1 and the first half of 3 are 4 versions old: too old for --max_policy_lag=3
    model = learner.model
    batch = hand_built_batch(model, versions=(4, 0, 2, (0, 0, 3, 3)))
    data = learner._prepare(batch)

    valids = torch.tensor([[True] * T, [False] * T, [True] * T, [False, False, True, True]])
    assert torch.equal(data["valids"], valids.reshape(-1))
    with torch.no_grad():
        bootstrap = model({"obs": batch["obs"]["obs"][:, T]}, batch["rnn_states"][:, T] if use_rnn else None).values
        values = torch.cat([batch["values"][:, :T], bootstrap.unsqueeze(1)], 1)
        rewards = batch["rewards"] + GAMMA * batch["values"][:, :T] * batch["time_outs"] * batch["dones"]
    torch.testing.assert_close(data["bootstrap_values"], bootstrap)
    advantages = gae_by_hand(rewards, batch["dones"], values, valids)
    if not vtrace:
        torch.testing.assert_close(data["advantages"], advantages.reshape(-1))
        torch.testing.assert_close(data["returns"], (advantages + values[:, :T] * valids).reshape(-1))

    chunk_ids = torch.arange(N)
    losses = learner._losses(data, chunk_ids, T)
    resets = batch["dones"].bool() | ~valids
    with torch.no_grad():
        params, cur_values = current_outputs(model, batch["obs"]["obs"], batch["rnn_states"], resets.float())
        if vtrace:
            log_rhos = behaviour_log_prob(params, batch["actions"].reshape(N * T, 2)) - batch["log_prob"].reshape(-1)
            vs, advantages = vtrace_by_hand(
                rewards,
                batch["dones"],
                torch.cat([cur_values.view(N, T), bootstrap.unsqueeze(1)], 1),
                log_rhos.view(N, T),
            )
            returns = vs.reshape(-1)
        else:
            returns = (advantages + values[:, :T] * valids).reshape(-1)
        expected = sf_loss_by_hand(
            cfg,
            params,
            cur_values,
            batch,
            advantages.reshape(-1),
            returns,
            batch["values"][:, :T].reshape(-1),
            valids.reshape(-1),
        )
    for key, value in expected.items():
        torch.testing.assert_close(losses[key].detach(), value, rtol=1e-4, atol=1e-5, msg=key)
    total = sum(expected[k] for k in ("policy_loss", "value_loss", "exploration_loss", "kl_loss"))
    torch.testing.assert_close(losses["total_loss"].detach(), total, rtol=1e-4, atol=1e-5)


def train_once(tmp_path, batch_fn, *flags: str) -> torch.nn.Module:
    cfg = make_cfg(tmp_path, "--use_rnn=False", *flags)
    learner = make_learner(cfg, tmp_path)
    learner.version = 5
    learner._on_train(Train(batch_fn(learner.model), N * T, 0))
    return learner.model


def test_stale_trajectories_are_masked_out_of_the_update(tmp_path):
    """Two of four trajectories 5 versions old with --max_policy_lag=5: the update equals one on the fresh half
    alone at half the learning rate (Sample Factory scales the step by the valid fraction)."""
    versions = (5, 0, 4, 0)
    keep = torch.tensor([0, 2])

    def mixed(model):
        return hand_built_batch(model, versions=versions)

    def fresh_only(model):
        full = hand_built_batch(model, versions=versions)
        pick = {k: v.index_select(0, keep) for k, v in full.items() if k != "obs"}
        pick["obs"] = {"obs": full["obs"]["obs"].index_select(0, keep)}
        return pick

    masked = train_once(tmp_path / "a", mixed, "--max_policy_lag=5", "--learning_rate=1e-3")
    alone = train_once(
        tmp_path / "b", fresh_only, "--max_policy_lag=5", "--learning_rate=5e-4", f"--batch_size={2 * T}"
    )
    unmasked = train_once(tmp_path / "c", mixed, "--max_policy_lag=100", "--learning_rate=1e-3")
    for (name, a), b in zip(masked.named_parameters(), alone.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)
    assert any(not torch.allclose(a, c, atol=1e-6) for a, c in zip(masked.parameters(), unmasked.parameters()))


def test_kl_adaptive_learning_rate_follows_exact_kl_and_survives_resume(tmp_path):
    flags = (
        "--lr_schedule=kl_adaptive_minibatch",
        "--lr_schedule_kl_threshold=1e-6",
        "--learning_rate=1e-3",
        "--use_rnn=False",
    )
    cfg = make_cfg(tmp_path, *flags)
    learner = make_learner(cfg, tmp_path)
    batch = hand_built_batch(learner.model)
    learner._on_train(Train(batch, N * T, 0))  # behaviour 0.3 away from the policy: KL far above 2 * threshold
    assert learner.lr == pytest.approx(1e-3 / 1.5)
    learner.save()

    resumed = make_learner(make_cfg(tmp_path, *flags), tmp_path, resume=True)
    assert resumed.lr == pytest.approx(1e-3 / 1.5)
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 / 1.5)


def test_linear_decay_steps_every_minibatch_as_sample_factory_and_survives_resume(tmp_path):
    """The rate of each optimizer step is lr * (1 - k / (train_for_env_steps // batch_size * num_epochs)) after k
    steps (Sample Factory's LinearDecayScheduler); a resumed learner continues from its saved step count."""
    flags = (
        "--lr_schedule=linear_decay",
        "--learning_rate=1e-3",
        "--use_rnn=False",
        f"--batch_size={N * T // 2}",
        "--num_batches_per_epoch=2",
        "--num_epochs=3",
        "--train_for_env_steps=80",  # 80 // 8 * 3 = 30 steps to zero
    )
    learner = make_learner(make_cfg(tmp_path, *flags), tmp_path)
    applied = []
    step = learner.optimizer.step

    def recording_step(*args, **kwargs):
        applied.append(learner.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    learner.optimizer.step = recording_step
    learner._on_train(Train(hand_built_batch(learner.model), N * T, 0))
    assert applied == pytest.approx([1e-3 * (1 - k / 30) for k in range(6)])
    assert learner.lr == pytest.approx(1e-3 * (1 - 6 / 30))
    learner.save()

    resumed = make_learner(make_cfg(tmp_path, *flags), tmp_path, resume=True)
    assert resumed.sgd_steps == 6
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * (1 - 6 / 30))
