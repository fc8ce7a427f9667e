"""PPO losses: clipped surrogate, clipped value loss, exploration term, optional KL penalty to the behaviour policy
(Schulman et al., 2017; PPO2 value clipping)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossInputs:
    """Flat [B] tensors; values, old_values and returns live in normalized-return space."""

    log_prob: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    values: torch.Tensor
    old_values: torch.Tensor
    returns: torch.Tensor
    entropy: torch.Tensor
    uniform_kl: torch.Tensor | None = None  # given: exploration penalizes it (symmetric_kl) instead of rewarding entropy
    valids: torch.Tensor | None = None


def _masked_mean(x: torch.Tensor, valids: torch.Tensor | None) -> torch.Tensor:
    if valids is None:
        return x.mean()
    return (x * valids).sum() / valids.sum().clamp(min=1.0)


def ppo_losses(inp: LossInputs, clip_ratio: float, clip_value: float, value_loss_coeff: float,
               exploration_loss_coeff: float, kl_loss_coeff: float = 0.0) -> dict[str, torch.Tensor]:
    mean = lambda x: _masked_mean(x, inp.valids)

    log_ratio = inp.log_prob - inp.old_log_prob
    ratio = log_ratio.exp()
    surrogate = ratio * inp.advantages
    clipped_surrogate = ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio) * inp.advantages
    policy_loss = -mean(torch.min(surrogate, clipped_surrogate))

    clipped_values = inp.old_values + (inp.values - inp.old_values).clamp(-clip_value, clip_value)
    value_error = torch.max((inp.values - inp.returns).square(), (clipped_values - inp.returns).square())
    value_loss = value_loss_coeff * 0.5 * mean(value_error)

    if inp.uniform_kl is None:
        exploration_loss = -exploration_loss_coeff * mean(inp.entropy)
    else:
        exploration_loss = exploration_loss_coeff * mean(inp.uniform_kl)

    # KL(behaviour || current) from the sampled actions: the low-variance, always non-negative estimator
    kl = mean((ratio - 1.0) - log_ratio)
    kl_loss = kl_loss_coeff * kl

    with torch.no_grad():
        clip_fraction = mean(((ratio - 1.0).abs() > clip_ratio).float())
        ratio_mean = mean(ratio)

    return {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "exploration_loss": exploration_loss,
        "kl_loss": kl_loss,
        "total_loss": policy_loss + value_loss + exploration_loss + kl_loss,
        "entropy": mean(inp.entropy).detach(),
        "clip_fraction": clip_fraction,
        "ratio_mean": ratio_mean,
        "approx_kl": kl.detach(),
    }
