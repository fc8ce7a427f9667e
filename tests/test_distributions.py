"""ActionDistribution against torch.distributions on categorical, multi-categorical, Gaussian and mixed specs."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical, Normal

from sf.envs.spaces import ActionSpec
from sf.model.action_distributions import ActionDistribution

B = 64


class Reference:
    """The same joint distribution built from torch.distributions, one object per sub-action."""

    def __init__(self, spec: ActionSpec, logits: torch.Tensor, log_std: torch.Tensor | None):
        self.spec = spec
        at = 0
        self.categoricals = []
        for size in spec.discrete_sizes:
            self.categoricals.append(Categorical(logits=logits[:, at : at + size]))
            at += size
        self.normal = Normal(logits[:, at:], log_std.exp().expand(logits.shape[0], -1)) if spec.continuous_dim else None

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        n = len(self.spec.discrete_sizes)
        total = sum(c.log_prob(actions[:, i].long()) for i, c in enumerate(self.categoricals))
        if self.normal is not None:
            total = total + self.normal.log_prob(actions[:, n:]).sum(-1)
        return total

    def entropy(self) -> torch.Tensor:
        total = sum(c.entropy() for c in self.categoricals)
        return total + self.normal.entropy().sum(-1) if self.normal is not None else total

    def kl(self, other: Reference) -> torch.Tensor:
        kl = torch.distributions.kl_divergence
        total = sum(kl(p, q) for p, q in zip(self.categoricals, other.categoricals))
        return total + kl(self.normal, other.normal).sum(-1) if self.normal is not None else total


SPECS = {
    "discrete": ActionSpec((5,), 0),
    "multi_equal": ActionSpec((3, 3, 3), 0),
    "multi_unequal": ActionSpec((2, 4, 4, 3), 0),
    "gaussian": ActionSpec((), 3),
    "mixed": ActionSpec((3, 2), 2),
}


def make(spec: ActionSpec, seed: int, per_sample_std: bool = False):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, spec.num_logits, generator=gen) * 2.0
    log_std = None
    if spec.continuous_dim:
        shape = (B, spec.continuous_dim) if per_sample_std else (spec.continuous_dim,)
        log_std = torch.randn(shape, generator=gen) * 0.5
    return ActionDistribution(spec, logits, log_std), Reference(spec, logits, log_std)


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("per_sample_std", [False, True])
def test_log_prob_entropy_kl_match_torch_distributions(name, per_sample_std):
    spec = SPECS[name]
    dist, ref = make(spec, 0, per_sample_std)
    other, other_ref = make(spec, 1, per_sample_std)
    actions = dist.sample()
    assert actions.shape == (B, spec.flat_dim) and actions.dtype == torch.float32
    torch.testing.assert_close(dist.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    torch.testing.assert_close(dist.kl(other), ref.kl(other_ref))
    assert dist.kl(dist).abs().max() < 1e-5


@pytest.mark.parametrize("name", ["discrete", "multi_equal", "multi_unequal"])
def test_symmetric_kl_to_uniform_matches_torch_distributions(name):
    spec = SPECS[name]
    dist, ref = make(spec, 3)
    kl = torch.distributions.kl_divergence
    expected = 0.0
    for c in ref.categoricals:
        uniform = Categorical(logits=torch.zeros_like(c.logits))
        expected = expected + 0.5 * (kl(c, uniform) + kl(uniform, c))  # Sample Factory's symmetric KL
    torch.testing.assert_close(dist.symmetric_kl_to_uniform(), expected)
    flat = ActionDistribution(spec, torch.zeros(B, spec.num_logits))
    assert flat.symmetric_kl_to_uniform().abs().max() < 1e-6


def test_symmetric_kl_to_uniform_rejects_a_gaussian_part():
    dist, _ = make(SPECS["mixed"], 0)
    with pytest.raises(ValueError, match="categorical"):
        dist.symmetric_kl_to_uniform()


@pytest.mark.parametrize("name", SPECS)
def test_sampled_indices_are_valid_and_deterministic_is_mode(name):
    spec = SPECS[name]
    dist, ref = make(spec, 2)
    n = len(spec.discrete_sizes)
    actions = dist.sample()
    for i, size in enumerate(spec.discrete_sizes):
        column = actions[:, i]
        assert torch.equal(column, column.round()) and column.min() >= 0 and column.max() < size
    mode = dist.deterministic()
    for i, c in enumerate(ref.categoricals):
        assert torch.equal(mode[:, i].long(), c.probs.argmax(-1))
    if spec.continuous_dim:
        assert torch.equal(mode[:, n:], ref.normal.mean)


def test_categorical_sampling_frequencies_follow_probabilities():
    spec = ActionSpec((4, 4), 0)
    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0, -3.0, 0.5, 0.5, 0.0]]).expand(20000, -1)
    torch.manual_seed(0)
    actions = ActionDistribution(spec, logits).sample().long()
    for i in range(2):
        freq = torch.bincount(actions[:, i], minlength=4).float() / actions.shape[0]
        torch.testing.assert_close(freq, logits[0, 4 * i : 4 * i + 4].softmax(-1), atol=0.015, rtol=0)


def test_gaussian_sampling_moments():
    spec = ActionSpec((), 2)
    mean = torch.tensor([[1.5, -2.0]]).expand(20000, -1)
    log_std = torch.tensor([0.0, -1.0])
    torch.manual_seed(0)
    actions = ActionDistribution(spec, mean, log_std).sample()
    torch.testing.assert_close(actions.mean(0), mean[0], atol=0.03, rtol=0)
    torch.testing.assert_close(actions.std(0), log_std.exp(), atol=0.03, rtol=0)


@pytest.mark.parametrize("name", ["mixed", "gaussian"])
def test_log_prob_and_entropy_gradients_match_torch_distributions(name):
    spec = SPECS[name]
    gen = torch.Generator().manual_seed(7)
    logits_init = torch.randn(B, spec.num_logits, generator=gen)
    log_std_init = torch.randn(spec.continuous_dim, generator=gen) * 0.3
    logits, log_std = logits_init.clone().requires_grad_(), log_std_init.clone().requires_grad_()
    dist = ActionDistribution(spec, logits, log_std)
    actions = dist.sample()
    assert not actions.requires_grad and not dist.deterministic().requires_grad
    (dist.log_prob(actions).sum() + dist.entropy().sum()).backward()

    ref_logits, ref_log_std = logits_init.clone().requires_grad_(), log_std_init.clone().requires_grad_()
    ref = Reference(spec, ref_logits, ref_log_std)
    (ref.log_prob(actions).sum() + ref.entropy().sum()).backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)
    torch.testing.assert_close(log_std.grad, ref_log_std.grad)


def test_continuous_part_requires_log_std():
    with pytest.raises(ValueError, match="log_std"):
        ActionDistribution(ActionSpec((), 2), torch.zeros(3, 2))


@pytest.mark.parametrize("name", SPECS)
def test_empty_batch(name):
    spec = SPECS[name]
    log_std = torch.zeros(spec.continuous_dim) if spec.continuous_dim else None
    dist = ActionDistribution(spec, torch.zeros(0, spec.num_logits), log_std)
    actions = dist.sample()
    assert actions.shape == (0, spec.flat_dim)
    assert dist.log_prob(actions).shape == dist.entropy().shape == dist.kl(dist).shape == (0,)
