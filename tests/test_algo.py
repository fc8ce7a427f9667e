"""GAE, V-trace, PPO losses, RunningMeanStd and learning-rate schedules against plain reference computations."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

from sf.algo.gae import compute_gae, compute_gae_numba, compute_gae_torch
from sf.algo.lr_schedule import LearningRateSchedule
from sf.algo.ppo_loss import LossCoefficients, LossInputs, ppo_losses
from sf.algo.running_mean_std import RunningMeanStd
from sf.algo.vtrace import compute_vtrace


def rollout(n: int = 6, t: int = 9, seed: int = 0, done_prob: float = 0.2):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(n, t, generator=gen)
    dones = (torch.rand(n, t, generator=gen) < done_prob).float()
    values = torch.randn(n, t + 1, generator=gen)
    return rewards, dones, values


def gae_reference(rewards, dones, values, gamma, lam):
    r, d, v = rewards.tolist(), dones.tolist(), values.tolist()
    adv = [[0.0] * len(r[0]) for _ in r]
    for i in range(len(r)):
        last = 0.0
        for t in reversed(range(len(r[0]))):
            delta = r[i][t] + gamma * v[i][t + 1] * (1 - d[i][t]) - v[i][t]
            last = delta + gamma * lam * (1 - d[i][t]) * last
            adv[i][t] = last
    adv = torch.tensor(adv)
    return adv, adv + values[:, :-1]


def vtrace_reference(rewards, dones, values, log_rhos, gamma, rho_bar, c_bar):
    n, t_len = rewards.shape
    vs = torch.zeros(n, t_len)
    pg = torch.zeros(n, t_len)
    for i in range(n):
        vs_next = values[i, t_len].item()
        for t in reversed(range(t_len)):
            rho = math.exp(log_rhos[i, t].item())
            disc = gamma * (1 - dones[i, t].item())
            v, v_next = values[i, t].item(), values[i, t + 1].item()
            r = rewards[i, t].item()
            vs_t = v + min(rho_bar, rho) * (r + disc * v_next - v) + disc * min(c_bar, rho) * (vs_next - v_next)
            pg[i, t] = min(rho_bar, rho) * (r + disc * vs_next - v)
            vs[i, t] = vs_t
            vs_next = vs_t
    return vs, pg


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_gae_numba_and_torch_match_reference(gamma, lam):
    rewards, dones, values = rollout()
    ref_adv, ref_ret = gae_reference(rewards, dones, values, gamma, lam)
    for impl in (compute_gae_numba, compute_gae_torch, compute_gae):
        adv, ret = impl(rewards, dones, values, gamma, lam)
        torch.testing.assert_close(adv, ref_adv)
        torch.testing.assert_close(ret, ref_ret)


def test_gae_accepts_bool_dones_and_strided_values():
    rewards, dones, values = rollout(seed=1)
    wide = torch.randn(values.shape[0], values.shape[1] + 3)
    wide[:, : values.shape[1]] = values
    adv, ret = compute_gae(rewards, dones.bool(), wide[:, : values.shape[1]], 0.99, 0.95)
    ref_adv, ref_ret = gae_reference(rewards, dones, values, 0.99, 0.95)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_gae_done_stops_bootstrap():
    rewards = torch.tensor([[1.0, 1.0]])
    values = torch.tensor([[0.0, 0.0, 100.0]])
    adv, _ = compute_gae(rewards, torch.tensor([[0.0, 1.0]]), values, 0.5, 1.0)
    torch.testing.assert_close(adv, torch.tensor([[1.5, 1.0]]))
    adv, _ = compute_gae(rewards, torch.tensor([[0.0, 0.0]]), values, 0.5, 1.0)
    torch.testing.assert_close(adv, torch.tensor([[26.5, 51.0]]))


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 0.5), (math.inf, math.inf)])
def test_vtrace_matches_reference(rho_bar, c_bar):
    rewards, dones, values = rollout(seed=2)
    log_rhos = torch.randn(rewards.shape, generator=torch.Generator().manual_seed(3))
    vs, pg = compute_vtrace(rewards, dones, values, log_rhos, 0.97, rho_bar, c_bar)
    ref_vs, ref_pg = vtrace_reference(rewards, dones, values, log_rhos, 0.97, rho_bar, c_bar)
    torch.testing.assert_close(vs, ref_vs)
    torch.testing.assert_close(pg, ref_pg)


def test_vtrace_on_policy_untruncated_equals_gae_lambda_one():
    rewards, dones, values = rollout(seed=4)
    vs, pg = compute_vtrace(rewards, dones, values, torch.zeros_like(rewards), 0.95, math.inf, math.inf)
    adv, ret = compute_gae(rewards, dones, values, 0.95, 1.0)
    torch.testing.assert_close(vs, ret)
    torch.testing.assert_close(pg, adv)


def normalized(xs: list[float]) -> list[float]:
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))  # unbiased, as torch.std
    return [(x - mean) / std for x in xs]


def test_ppo_losses_hand_checked():
    log_prob = torch.log(torch.tensor([1.5, 0.5, 1.1]))  # old log-probs are 0, so these are the ratios
    inp = LossInputs(
        log_prob=log_prob,
        old_log_prob=torch.zeros(3),
        advantages=torch.tensor([1.0, -2.0, 3.0]),
        values=torch.tensor([1.0, 0.0, 2.0]),
        old_values=torch.tensor([0.0, 0.0, 1.8]),
        returns=torch.tensor([2.0, 1.0, 2.0]),
        entropy=torch.tensor([0.3, 0.6, 0.9]),
        kl_to_behaviour=torch.tensor([0.1, 0.2, 0.6]),
    )
    out = ppo_losses(
        inp,
        LossCoefficients(
            clip_ratio=0.2, clip_value=0.5, value_loss_coeff=0.5, exploration_loss_coeff=0.01, kl_loss_coeff=0.4
        ),
    )
    a = normalized([1.0, -2.0, 3.0])  # [0.1325, -1.0596, 0.9272]
    # clip range [1/1.2, 1.2]: r=1.5, A>0 -> 1.2*A; r=0.5, A<0 -> min(0.5A, A/1.2) = A/1.2; r=1.1 inside -> 1.1*A
    policy = -(1.2 * a[0] + a[1] / 1.2 + 1.1 * a[2]) / 3
    # clipped values 0.5, 0.0, 2.0 -> max squared errors: max(1, 2.25)=2.25, max(1, 1)=1, max(0, 0)=0; no 0.5 factor
    value = 0.5 * (2.25 + 1.0 + 0.0) / 3
    exploration = -0.01 * 0.6
    kl = (0.1 + 0.2 + 0.6) / 3
    expected = {
        "policy_loss": policy,
        "value_loss": value,
        "exploration_loss": exploration,
        "kl_loss": 0.4 * kl,
        "total_loss": policy + value + exploration + 0.4 * kl,
        "entropy": 0.6,
        "clip_fraction": 2 / 3,
        "ratio_mean": 3.1 / 3,
        "kl_divergence": kl,
    }
    assert set(out) == set(expected)
    for key, value in expected.items():
        assert out[key].dim() == 0
        assert out[key].item() == pytest.approx(value, rel=1e-5), key


def test_ppo_clip_range_is_reciprocal_and_ratio_is_bounded():
    # clip 1.5: PPO's 1 - c would be negative; Sample Factory's range is [0.4, 2.5]. Ratios 0.01 and 100 are first
    # clamped to [0.05, 20]; three of the four ratios lie outside the clip range.
    ratios = torch.tensor([0.01, 1.0, 3.0, 100.0])
    adv = torch.tensor([2.0, 1.0, -1.0, -2.0])
    inp = LossInputs(
        log_prob=ratios.log(),
        old_log_prob=torch.zeros(4),
        advantages=adv,
        values=torch.zeros(4),
        old_values=torch.zeros(4),
        returns=torch.zeros(4),
        entropy=torch.zeros(4),
        kl_to_behaviour=torch.zeros(4),
    )
    out = ppo_losses(inp, LossCoefficients(1.5, 1.0, 0.0, 0.0))
    a = normalized([2.0, 1.0, -1.0, -2.0])
    r = [0.05, 1.0, 3.0, 20.0]
    clipped = [min(max(x, 0.4), 2.5) for x in r]
    expected = -sum(min(x * ai, c * ai) for x, c, ai in zip(r, clipped, a)) / 4
    assert out["policy_loss"].item() == pytest.approx(expected, rel=1e-5)
    assert out["clip_fraction"].item() == pytest.approx(3 / 4)


def test_symmetric_kl_exploration_is_guarded_and_clamped():
    def exploration(uniform_kl):
        inp = LossInputs(
            log_prob=torch.zeros(2),
            old_log_prob=torch.zeros(2),
            advantages=torch.tensor([1.0, -1.0]),
            values=torch.zeros(2),
            old_values=torch.zeros(2),
            returns=torch.zeros(2),
            entropy=torch.tensor([5.0, 5.0]),
            kl_to_behaviour=torch.zeros(2),
            uniform_kl=uniform_kl,
        )
        return ppo_losses(inp, LossCoefficients(0.2, 1.0, 0.5, exploration_loss_coeff=0.1))["exploration_loss"].item()

    assert exploration(torch.tensor([0.2, 0.4])) == pytest.approx(0.1 * 0.3)  # the entropy plays no part
    assert exploration(torch.tensor([50.0, 30.0])) == pytest.approx(0.1 * 30.0)  # clamped at 30
    assert exploration(torch.tensor([float("inf"), 1.0])) == 0.0
    assert exploration(torch.tensor([float("nan"), 1.0])) == 0.0


def test_ppo_losses_masked_mean_ignores_invalid_steps():
    gen = torch.Generator().manual_seed(5)
    fields = {
        k: torch.randn(8, generator=gen)
        for k in (
            "log_prob",
            "old_log_prob",
            "advantages",
            "values",
            "old_values",
            "returns",
            "entropy",
            "kl_to_behaviour",
        )
    }
    valids = torch.tensor([1, 1, 0, 1, 0, 1, 1, 0], dtype=torch.bool)
    coeffs = LossCoefficients(0.2, 1.0, 0.5, 0.003, 0.2)
    masked = ppo_losses(LossInputs(**fields, valids=valids), coeffs)
    subset = ppo_losses(LossInputs(**{k: v[valids] for k, v in fields.items()}), coeffs)
    unmasked = ppo_losses(LossInputs(**fields), coeffs)
    for key in masked:
        torch.testing.assert_close(masked[key], subset[key])
    assert not torch.allclose(masked["total_loss"], unmasked["total_loss"])


def test_ppo_loss_gradients_match_hand_derivation():
    """At ratio 1 (inside the clip range) d/dlogp = -A_norm / B; the unclipped value error wins, so
    d/dV = coeff * 2 (V - R) / B; d/dH = -exploration_coeff / B."""
    log_prob = torch.zeros(4, requires_grad=True)
    values = torch.zeros(4, requires_grad=True)
    entropy = torch.ones(4, requires_grad=True)
    adv = [1.0, -1.0, 2.0, 0.0]
    inp = LossInputs(
        log_prob,
        torch.zeros(4),
        torch.tensor(adv),
        values,
        old_values=torch.full((4,), 3.0),
        returns=torch.full((4,), 2.0),
        entropy=entropy,
        kl_to_behaviour=torch.zeros(4),
    )
    ppo_losses(inp, LossCoefficients(0.2, 1.0, value_loss_coeff=0.5, exploration_loss_coeff=0.01))[
        "total_loss"
    ].backward()
    torch.testing.assert_close(log_prob.grad, -torch.tensor(normalized(adv)) / 4)
    torch.testing.assert_close(values.grad, torch.full((4,), 0.5 * 2 * (0.0 - 2.0) / 4))
    torch.testing.assert_close(entropy.grad, torch.full((4,), -0.01 / 4))


def masked_gae_reference(rewards, dones, values, valids, gamma, lam):
    """Sample Factory's masked GAE written out step by step."""
    r, d, v, m = rewards.tolist(), dones.tolist(), values.tolist(), valids.float().tolist()
    adv = [[0.0] * len(r[0]) for _ in r]
    for i in range(len(r)):
        last = 0.0
        for t in reversed(range(len(r[0]))):
            delta = (r[i][t] - v[i][t]) * m[i][t] + (1 - d[i][t]) * gamma * v[i][t + 1] * m[i][t + 1]
            discount = gamma * lam * m[i][t] + (1 - m[i][t])
            last = delta + discount * last * (1 - d[i][t])
            adv[i][t] = last
    adv = torch.tensor(adv)
    return adv, adv + values[:, :-1] * valids[:, :-1].float()


def test_gae_with_valids_matches_reference_in_both_implementations():
    rewards, dones, values = rollout(seed=4)
    valids = torch.rand(values.shape, generator=torch.Generator().manual_seed(9)) > 0.3
    ref_adv, ref_ret = masked_gae_reference(rewards, dones, values, valids, 0.95, 0.9)
    for impl in (compute_gae_numba, compute_gae_torch):
        adv, ret = impl(rewards, dones, values, 0.95, 0.9, valids)
        torch.testing.assert_close(adv, ref_adv)
        torch.testing.assert_close(ret, ref_ret)
    plain, _ = compute_gae(rewards, dones, values, 0.95, 0.9)
    assert not torch.allclose(plain, ref_adv)


def test_running_mean_std_matches_numpy_after_several_updates():
    gen = np.random.default_rng(0)
    batches = [gen.normal(3.0, 2.0, size=(n, 4)).astype(np.float32) for n in (5, 100, 37, 1)]
    rms = RunningMeanStd((4,))
    for batch in batches:
        rms.update(torch.from_numpy(batch))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean.numpy(), everything.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rms.var.numpy(), everything.var(0), rtol=1e-4)
    assert rms.count.item() == len(everything)

    x = torch.from_numpy(everything[:10])
    expected = (everything[:10] - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-5)
    torch.testing.assert_close(rms.normalize(x), torch.from_numpy(expected).clamp(-5, 5), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rms.denormalize(rms.normalize(x)), x, rtol=1e-4, atol=1e-4)


def test_running_mean_std_scalar_over_multiple_batch_dims_and_clip():
    rms = RunningMeanStd((), clip=1.0)
    x = torch.arange(24.0).view(2, 3, 4)
    rms.update(x)
    assert rms.mean.item() == pytest.approx(11.5)
    assert rms.var.item() == pytest.approx(x.var(unbiased=False).item())
    assert rms.normalize(torch.tensor([-1000.0, 1000.0])).tolist() == [-1.0, 1.0]
    assert set(dict(rms.named_buffers())) == {"mean", "var", "count"}


def lr_cfg(schedule: str, **overrides):
    base = dict(
        lr_schedule=schedule,
        learning_rate=1e-3,
        train_for_env_steps=1000,
        batch_size=10,
        num_epochs=2,
        lr_schedule_kl_threshold=0.01,
        lr_adaptive_min=1e-4,
        lr_adaptive_max=2e-3,
    )
    return types.SimpleNamespace(**{**base, **overrides})


def test_constant_and_linear_decay_schedules():
    constant = LearningRateSchedule(lr_cfg("constant"))
    assert constant.value(0) == constant.value(900, kl=1.0) == 1e-3
    # Sample Factory's horizon: 1000 // 10 * 2 = 200 SGD steps, the lr falling linearly with them
    linear = LearningRateSchedule(lr_cfg("linear_decay"))
    assert linear.value(0) == pytest.approx(1e-3)
    assert linear.value(50) == pytest.approx(7.5e-4)
    assert linear.value(150) == pytest.approx(2.5e-4)
    assert linear.value(5000) == 0.0


@pytest.mark.parametrize("schedule", ["kl_adaptive_minibatch", "kl_adaptive_epoch"])
def test_kl_adaptive_schedule_moves_by_1_5_within_bounds(schedule):
    s = LearningRateSchedule(lr_cfg(schedule))
    assert s.value(0) == pytest.approx(1e-3)
    assert s.value(0, kl=0.03) == pytest.approx(1e-3 / 1.5)
    assert s.value(0, kl=0.01) == pytest.approx(1e-3 / 1.5)  # within [threshold/2, 2*threshold]: unchanged
    assert s.value(0, kl=0.001) == pytest.approx(1e-3)
    for _ in range(10):
        s.value(0, kl=0.0)
    assert s.value(0) == pytest.approx(2e-3)
    for _ in range(20):
        s.value(0, kl=1.0)
    assert s.value(0) == pytest.approx(1e-4)


def test_unknown_lr_schedule_names_the_flag():
    with pytest.raises(ValueError, match="--lr_schedule"):
        LearningRateSchedule(lr_cfg("cosine"))


def test_running_mean_std_follows_every_change_of_its_statistics():
    """normalize / denormalize keep sqrt(var + eps) between calls: an update or a load of other statistics must
    still be seen by the next call."""
    rms = RunningMeanStd((3,), clip=None)
    x = torch.randn(64, 3) * 4 + 2
    rms.normalize(x)  # statistics still at their start
    rms.update(x)
    assert torch.allclose(rms.normalize(x), (x - rms.mean) / torch.sqrt(rms.var + rms.epsilon))
    other = RunningMeanStd((3,), clip=None)
    other.update(torch.randn(64, 3) * 0.5)
    rms.load_state_dict(other.state_dict())
    assert torch.allclose(rms.denormalize(x), x * torch.sqrt(other.var + other.epsilon) + other.mean)


def test_running_mean_std_summary_uses_sample_factorys_names_and_reductions():
    rms = RunningMeanStd((2,))
    x = torch.tensor([[0.0, 10.0], [2.0, 30.0], [4.0, 20.0]])
    rms.update(x)
    std = torch.sqrt(x.var(0, unbiased=False) + 1e-5)
    assert rms.summary("obs") == pytest.approx({"obs_running_mean": 11.0, "obs_running_std": float(std.mean())})
