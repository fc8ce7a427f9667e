"""Generalized Advantage Estimation over [N, T] trajectories: the TD errors and their discounts for all steps at
once, then the reverse discounted scan (`sf.algo.discounted_scan`) that V-trace shares.

On CPU tensors the terms come from a numba kernel as well (torch's elementwise calls cost about 90 us at N=32,
T=32, five times the whole numba path; `benchmarks/bench_gae.py`); elsewhere from torch.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from sf.algo.discounted_scan import as_float32, reverse_scan_torch, scan_kernel


@torch.no_grad()
def gae_terms(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    valids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(TD errors, discounts) [N, T]: the advantage at t is its TD error plus its discount times the advantage at
    t + 1. An invalid step adds no TD error, is not bootstrapped from, and passes the next advantage undiscounted."""
    not_done = 1.0 - dones.float()
    valid = valids.float() if valids is not None else torch.ones_like(values)
    deltas = (rewards - values[:, :-1]) * valid[:, :-1] + gamma * values[:, 1:] * valid[:, 1:] * not_done
    discounts = (gamma * gae_lambda * valid[:, :-1] + (1.0 - valid[:, :-1])) * not_done
    return deltas, discounts


@numba.njit(cache=True, fastmath=False)
def _gae_kernel(
    rewards: np.ndarray,
    dones: np.ndarray,
    values: np.ndarray,
    valids: np.ndarray,
    gamma: float,
    gae_lambda: float,
    deltas: np.ndarray,
    discounts: np.ndarray,
    advantages: np.ndarray,
    returns: np.ndarray,
) -> None:
    """`gae_terms` into `deltas` and `discounts`, the scan into `advantages`, and the returns."""
    n, t_len = rewards.shape
    for i in range(n):
        for t in range(t_len):
            not_done = 1.0 - dones[i, t]
            deltas[i, t] = (rewards[i, t] - values[i, t]) * valids[i, t] + gamma * values[i, t + 1] * valids[
                i, t + 1
            ] * not_done
            discounts[i, t] = (gamma * gae_lambda * valids[i, t] + (1.0 - valids[i, t])) * not_done
    scan_kernel(deltas, discounts, advantages)
    for i in range(n):
        for t in range(t_len):
            returns[i, t] = advantages[i, t] + values[i, t] * valids[i, t]


def _returns(advantages: torch.Tensor, values: torch.Tensor, valids: torch.Tensor | None) -> torch.Tensor:
    valid = valids.float() if valids is not None else torch.ones_like(values)
    return advantages + values[:, :-1] * valid[:, :-1]


def compute_gae_numba(rewards, dones, values, gamma, gae_lambda, valids=None) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU tensors only: terms and scan in numba, over numpy views (copied only if not contiguous float32)."""
    r, d, v = as_float32(rewards), as_float32(dones), as_float32(values)
    m = as_float32(valids) if valids is not None else np.ones_like(v)
    deltas, discounts, advantages, returns = (np.empty_like(r) for _ in range(4))
    _gae_kernel(r, d, v, m, float(gamma), float(gae_lambda), deltas, discounts, advantages, returns)
    return torch.from_numpy(advantages), torch.from_numpy(returns)


def compute_gae_torch(rewards, dones, values, gamma, gae_lambda, valids=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Any device: the scan as a torch loop over T."""
    advantages = reverse_scan_torch(*gae_terms(rewards, dones, values, gamma, gae_lambda, valids))
    return advantages, _returns(advantages, values, valids)


def compute_gae(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    valids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (advantages + values) for rewards/dones [N, T] and values [N, T+1].

    `dones[:, t] == 1` means the episode ended at step t: no bootstrap from `values[:, t+1]` and no
    advantage flows back across that step. `valids` [N, T+1] (default: all valid) masks steps as Sample
    Factory does: an invalid step adds no TD error of its own, is not bootstrapped from, and passes the
    advantage of the step after it through undiscounted.
    """
    if rewards.device.type == "cpu":
        return compute_gae_numba(rewards, dones, values, gamma, gae_lambda, valids)
    return compute_gae_torch(rewards, dones, values, gamma, gae_lambda, valids)
