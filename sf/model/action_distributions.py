"""The policy's action distribution over sf's flat action vector, in plain tensor math.

torch.distributions objects validate arguments and build per-call Python state that shows up on the
inference hot path; here the categorical part is one log-softmax per run of equal-sized groups (a single
Discrete or an equal-sized MultiDiscrete is one `[B, G, K]` tensor, no loop) and the Gaussian part is a
handful of elementwise ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F

from sf.envs.spaces import ActionSpec

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
# Sample Factory keeps the Gaussian's stddev inside [1e-4, 1e4]
LOG_STD_MIN, LOG_STD_MAX = math.log(1e-4), math.log(1e4)


@dataclass(frozen=True)
class _Block:
    """`groups` consecutive categorical sub-actions with `size` choices each."""

    groups: int
    size: int
    logit_start: int
    action_start: int


@cache
def _blocks(discrete_sizes: tuple[int, ...]) -> tuple[_Block, ...]:
    blocks: list[_Block] = []
    logit_at = action_at = 0
    for size in discrete_sizes:
        last = blocks[-1] if blocks else None
        if last is not None and last.size == size:
            blocks[-1] = _Block(last.groups + 1, size, last.logit_start, last.action_start)
        else:
            blocks.append(_Block(1, size, logit_at, action_at))
        logit_at += size
        action_at += 1
    return tuple(blocks)


class ActionDistribution:
    """Categorical sub-actions (indices stored as floats) followed by a diagonal Gaussian.

    logits: [B, spec.num_logits], the categorical logits then the Gaussian means.
    log_std: [continuous_dim] or [B, continuous_dim]; required when spec.continuous_dim > 0.
    """

    def __init__(self, spec: ActionSpec, logits: torch.Tensor, log_std: torch.Tensor | None = None):
        self.spec = spec
        batch = logits.shape[0]
        self.log_probs = [  # one [B, G, K] per block
            F.log_softmax(logits[:, b.logit_start : b.logit_start + b.groups * b.size].view(batch, b.groups, b.size), 2)
            for b in _blocks(spec.discrete_sizes)
        ]
        self.continuous_dim = spec.continuous_dim
        if self.continuous_dim:
            if log_std is None:
                raise ValueError("a continuous action part needs log_std")
            num_discrete_logits = spec.num_logits - spec.continuous_dim
            self.mean = logits[:, num_discrete_logits:]
            self.log_std = log_std.expand_as(self.mean)
            self.std = self.log_std.exp()

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor) -> ActionDistribution:
        """The distribution of sf's parameter layout [B, num_logits + continuous_dim]: the categorical logits, the
        Gaussian means, then one log stddev per continuous dimension (clamped to Sample Factory's stddev range)."""
        if not spec.continuous_dim:
            return cls(spec, params)
        log_std = params[:, spec.num_logits :].clamp(LOG_STD_MIN, LOG_STD_MAX)
        return cls(spec, params[:, : spec.num_logits], log_std)

    def _join(self, categorical: list[torch.Tensor], continuous: torch.Tensor | None) -> torch.Tensor:
        parts = [c.float() for c in categorical] + ([continuous] if continuous is not None else [])
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    @torch.no_grad()
    def sample(self) -> torch.Tensor:
        """[B, flat_dim] float32, no grad. Categorical draws are Gumbel-max: argmax(log p - log E), E ~ Exp(1)."""
        categorical = [(lp - torch.empty_like(lp).exponential_().log()).argmax(-1) for lp in self.log_probs]
        continuous = torch.addcmul(self.mean, self.std, torch.randn_like(self.mean)) if self.continuous_dim else None
        return self._join(categorical, continuous)

    @torch.no_grad()
    def deterministic(self) -> torch.Tensor:
        """The most likely action: argmax of each categorical, the Gaussian mean."""
        return self._join([lp.argmax(-1) for lp in self.log_probs], self.mean.detach() if self.continuous_dim else None)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """[B]: the sum of the log-probabilities of every sub-action."""
        terms = [
            lp.gather(-1, actions[:, b.action_start : b.action_start + b.groups].long().unsqueeze(-1)).sum(dim=(1, 2))
            for b, lp in zip(_blocks(self.spec.discrete_sizes), self.log_probs)
        ]
        if self.continuous_dim:
            z = (actions[:, len(self.spec.discrete_sizes) :] - self.mean) / self.std
            terms.append(-(0.5 * z.square() + self.log_std + _HALF_LOG_2PI).sum(-1))
        return _sum(terms)

    def entropy(self) -> torch.Tensor:
        """[B]: the entropy of the joint distribution (sub-actions are independent, so entropies add)."""
        terms = [-(lp.exp() * lp).sum(dim=(1, 2)) for lp in self.log_probs]
        if self.continuous_dim:
            terms.append((self.log_std + 0.5 + _HALF_LOG_2PI).sum(-1))
        return _sum(terms)

    def symmetric_kl_to_uniform(self) -> torch.Tensor:
        """[B]: 0.5 * (KL(p || u) + KL(u || p)) against the uniform choice, summed over categorical sub-actions.

        The log K terms of the two directions cancel, leaving 0.5 * (sum(p log p) - mean(log p)) per sub-action.
        """
        if self.continuous_dim:
            raise ValueError("the symmetric-KL exploration term needs a purely categorical action space")
        terms = [0.5 * ((lp.exp() * lp).sum(-1) - lp.mean(-1)).sum(-1) for lp in self.log_probs]
        return _sum(terms)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """[B]: KL(self || other) for two distributions over the same action spec."""
        terms = [(lp.exp() * (lp - lq)).sum(dim=(1, 2)) for lp, lq in zip(self.log_probs, other.log_probs)]
        if self.continuous_dim:
            var_ratio = (self.std / other.std).square()
            mean_term = ((self.mean - other.mean) / other.std).square()
            terms.append(0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log()).sum(-1))
        return _sum(terms)

    # Sample Factory's names, for a model or a loss written against its distributions
    def kl_divergence(self, other: ActionDistribution) -> torch.Tensor:
        return self.kl(other)

    def symmetric_kl_with_uniform_prior(self) -> torch.Tensor:
        return self.symmetric_kl_to_uniform()


def _sum(terms: list[torch.Tensor]) -> torch.Tensor:
    return terms[0] if len(terms) == 1 else torch.stack(terms).sum(0)
