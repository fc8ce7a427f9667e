"""V-trace off-policy targets (Espeholt et al., 2018, "IMPALA"), vectorized over trajectories; the value corrections
are the reverse discounted scan GAE shares (`sf.algo.discounted_scan`)."""

from __future__ import annotations

import torch

from sf.algo.discounted_scan import reverse_discounted_scan


@torch.no_grad()
def compute_vtrace(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    values: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: float,
    rho_bar: float,
    c_bar: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Value targets vs [N, T] and policy-gradient advantages [N, T].

    values: [N, T+1] estimates of the current policy (the last column bootstraps); log_rhos: [N, T]
    log(pi / mu) of the taken actions. Truncation levels are rho_bar (for the TD error and the policy
    gradient) and c_bar (for the trace); `dones[:, t] == 1` cuts both the bootstrap and the trace at step t.
    """
    rhos = log_rhos.exp()
    clipped_rhos = rhos.clamp(max=rho_bar)
    discounts = gamma * (1.0 - dones.float())
    v_t, v_next = values[:, :-1], values[:, 1:]
    deltas = clipped_rhos * (rewards + discounts * v_next - v_t)
    trace = discounts * rhos.clamp(max=c_bar)

    vs = v_t + reverse_discounted_scan(deltas, trace)

    vs_next = torch.cat([vs[:, 1:], values[:, -1:]], dim=1)
    pg_advantages = clipped_rhos * (rewards + discounts * vs_next - v_t)
    return vs, pg_advantages
