"""PPO losses as Sample Factory 2.1.1 defines them (Schulman et al., 2017, with PPO2's value clipping).

With r = exp(log pi(a|s) - log mu(a|s)) clamped to [0.05, 20], A the advantages normalized over the minibatch's
valid samples, c = --ppo_clip_ratio, c_v = --ppo_clip_value, and every mean taken over valid samples only:

    policy_loss      = -mean(min(r * A, clamp(r, 1 / (1 + c), 1 + c) * A))
    value_loss       = value_loss_coeff * mean(max((V - R)^2, (V_old + clamp(V - V_old, -c_v, c_v) - R)^2))
    exploration_loss = -exploration_loss_coeff * mean(H(pi))                                    (entropy)
                     = exploration_loss_coeff * min(mean(0.5 * (KL(pi || U) + KL(U || pi))), 30)  (symmetric_kl;
                       0 when that mean is not finite)
    kl_loss          = kl_loss_coeff * mean(KL(pi || mu))     (exact, from the behaviour policy's stored logits)
    total_loss       = policy_loss + value_loss + exploration_loss + kl_loss
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RATIO_MIN, RATIO_MAX = 0.05, 20.0  # ratios beyond these are numerical noise; clamping also stops their gradient
SYMMETRIC_KL_MAX = 30.0
ADVANTAGE_STD_MIN = 1e-7


@dataclass
class LossInputs:
    """Flat [B] tensors; values, old_values and returns live in normalized-return space."""

    log_prob: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor  # as estimated (GAE or V-trace); normalized here, per minibatch
    values: torch.Tensor
    old_values: torch.Tensor
    returns: torch.Tensor
    entropy: torch.Tensor
    kl_to_behaviour: torch.Tensor  # KL(pi || mu) per sample
    uniform_kl: torch.Tensor | None = None  # symmetric KL to the uniform policy: given for symmetric_kl exploration
    valids: torch.Tensor | None = None  # bool; False samples take no part in any mean


@dataclass(frozen=True)
class LossCoefficients:
    clip_ratio: float
    clip_value: float
    value_loss_coeff: float
    exploration_loss_coeff: float
    kl_loss_coeff: float = 0.0


def masked_mean(x: torch.Tensor, valids: torch.Tensor | None) -> torch.Tensor:
    """Mean over the valid entries (all of them when `valids` is None)."""
    if valids is None:
        return x.mean()
    return x[valids].mean()


def normalize_advantages(advantages: torch.Tensor, valids: torch.Tensor | None) -> torch.Tensor:
    """(A - mean) / max(std, 1e-7), with mean and (unbiased) std over the valid entries."""
    valid = advantages if valids is None else advantages[valids]
    std, mean = torch.std_mean(valid)
    return (advantages - mean) / std.clamp_min(ADVANTAGE_STD_MIN)


def clip_range(clip_ratio: float) -> tuple[float, float]:
    """[1 / (1 + c), 1 + c]: symmetric in log space, and a valid range even for c >= 1."""
    high = 1.0 + clip_ratio
    return 1.0 / high, high


def ppo_losses(inp: LossInputs, coeffs: LossCoefficients) -> dict[str, torch.Tensor]:
    valids = inp.valids
    low, high = clip_range(coeffs.clip_ratio)

    advantages = normalize_advantages(inp.advantages, valids)
    ratio = (inp.log_prob - inp.old_log_prob).exp().clamp(RATIO_MIN, RATIO_MAX)
    surrogate = torch.min(ratio * advantages, ratio.clamp(low, high) * advantages)
    policy_loss = -masked_mean(surrogate, valids)

    clipped_values = inp.old_values + (inp.values - inp.old_values).clamp(-coeffs.clip_value, coeffs.clip_value)
    value_error = torch.max((inp.values - inp.returns).square(), (clipped_values - inp.returns).square())
    value_loss = coeffs.value_loss_coeff * masked_mean(value_error, valids)

    if inp.uniform_kl is None:
        exploration_loss = -coeffs.exploration_loss_coeff * masked_mean(inp.entropy, valids)
    else:
        exploration_loss = coeffs.exploration_loss_coeff * bounded_uniform_kl(masked_mean(inp.uniform_kl, valids))

    kl = masked_mean(inp.kl_to_behaviour, valids)
    kl_loss = coeffs.kl_loss_coeff * kl

    with torch.no_grad():
        valid_ratio = ratio if valids is None else ratio[valids]
        clip_fraction = ((valid_ratio < low) | (valid_ratio > high)).float().mean()

    return {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "exploration_loss": exploration_loss,
        "kl_loss": kl_loss,
        "total_loss": policy_loss + value_loss + exploration_loss + kl_loss,
        "entropy": masked_mean(inp.entropy, valids).detach(),
        "clip_fraction": clip_fraction,
        "ratio_mean": valid_ratio.mean(),
        "kl_divergence": kl.detach(),
    }


def bounded_uniform_kl(mean_kl: torch.Tensor) -> torch.Tensor:
    """Sample Factory's guard on the symmetric-KL term: a non-finite mean contributes 0, a large one at most 30."""
    if not torch.isfinite(mean_kl):
        return torch.zeros_like(mean_kl)
    return mean_kl.clamp(max=SYMMETRIC_KL_MAX)
