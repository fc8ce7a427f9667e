"""The numba inference step of small MLP policies against the torch model it stands for: the same distribution
parameters and values, log-probabilities that torch's distribution gives the sampled actions, draws that follow
the distribution, weights that follow the policy version, and torch for every model the kernel does not cover."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from sf.envs.spaces import ActionSpec
from sf.model import create_actor_critic
from sf.model.mlp_kernel import MlpPolicyKernel
from sf.runtime.buffers import TrajectoryBuffers, make_layout
from sf.runtime.inference_worker import InferenceWorker
from sf.runtime.messages import Actions, PolicyRequest
from sf.runtime.policy_store import LocalPolicyStore
from tests.test_model import DEFAULTS

torch.set_num_threads(1)

OBS_SPEC = {"obs": ((5,), np.dtype(np.float32))}
ROLLOUT = 8


def _cfg(**overrides) -> types.SimpleNamespace:
    run = dict(
        rollout=ROLLOUT,
        num_workers=1,
        num_policies=1,
        num_envs_per_worker=6,
        batch_size=48,
        num_batches_per_epoch=1,
        num_batches_to_accumulate=1,
        async_rl=True,
        mlp_inference_kernel=True,
    )
    return types.SimpleNamespace(**{**DEFAULTS, **run, **overrides})


class _Loop:
    def __init__(self):
        self.sent = []

    def send(self, dest, msg):
        self.sent.append((dest, msg))


def _worker(spec: ActionSpec, **overrides) -> tuple[InferenceWorker, TrajectoryBuffers]:
    cfg = _cfg(**overrides)
    torch.manual_seed(3)
    model = create_actor_critic(OBS_SPEC, spec, cfg)
    with torch.no_grad():  # statistics and weights away from their initial values, so every term counts
        for stats in model.obs_normalizer._stats_by_key.values():
            stats.mean.normal_()
            stats.var.uniform_(0.2, 3.0)
        if model.returns_normalizer is not None:
            model.returns_normalizer.mean.fill_(0.7)
            model.returns_normalizer.var.fill_(5.0)
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    buffers = TrajectoryBuffers(make_layout(cfg, OBS_SPEC, spec, model.rnn_state_size), shared=False)
    buffers.obs["obs"].normal_(generator=torch.Generator().manual_seed(5)).mul_(2.0)
    worker = InferenceWorker(cfg, 0, 0, buffers, model, LocalPolicyStore(), "cpu")
    worker.loop = _Loop()
    worker.on_start()
    return worker, buffers


CASES = {
    "discrete, tanh, normalized": (ActionSpec((2,), 0), dict(nonlinearity="tanh", normalize_input=True)),
    "multi-discrete, elu, returns": (ActionSpec((3, 3, 5), 0), dict(normalize_returns=True, decoder_mlp_layers=[8])),
    "gaussian, learned std, tanh scale": (
        ActionSpec((), 3),
        dict(nonlinearity="relu", normalize_input=True, normalize_returns=True, continuous_tanh_scale=2.0),
    ),
    "gaussian, adaptive std": (ActionSpec((), 2), dict(adaptive_stddev=True, nonlinearity="tanh")),
    "mixed": (ActionSpec((4,), 2), dict(normalize_input=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_step_matches_the_torch_model(name):
    spec, overrides = CASES[name]
    worker, buffers = _worker(spec, **overrides)
    assert worker.kernel is not None
    slots, steps = [0, 2, 3, 5, 7], [0, 3, 7, 1, 5]
    worker.requests.append(PolicyRequest(0, 1, slots, steps))
    worker.flush()
    ((dest, msg),) = worker.loop.sent
    assert dest == "RolloutWorker_w0" and type(msg) is Actions and msg == Actions(splits=[1], policy_id=0, seqs=[0])
    t = buffers.tensors
    obs = {"obs": buffers.obs["obs"][slots, steps]}
    with torch.no_grad():
        model = worker.model
        out = model.policy_step(model.normalize_obs(obs), None)
        dist = model.action_distribution(t["action_logits"][slots, steps])
        torch.testing.assert_close(t["action_logits"][slots, steps], out.action_logits, rtol=1e-5, atol=2e-6)
        torch.testing.assert_close(t["values"][slots, steps], out.values, rtol=1e-5, atol=2e-5)
        torch.testing.assert_close(
            t["log_prob"][slots, steps], dist.log_prob(t["actions"][slots, steps]), atol=2e-5, rtol=1e-5
        )
    assert (t["policy_version"][slots, steps] == worker.version).all()
    discrete = t["actions"][slots, steps][:, : len(spec.discrete_sizes)]
    assert all((discrete[:, j] < size).all() for j, size in enumerate(spec.discrete_sizes))


def test_draws_follow_the_distribution_and_the_seed():
    spec = ActionSpec((3,), 1)
    worker, buffers = _worker(spec, normalize_input=True)
    draws = []
    for _ in range(3000):
        worker.requests.append(PolicyRequest(0, 0, [1], [2]))
        worker.flush()
        draws.append(buffers.tensors["actions"][1, 2].clone())
    draws = torch.stack(draws)
    dist = worker.model.action_distribution(buffers.tensors["action_logits"][1, 2].unsqueeze(0))
    expected = dist.log_probs[0][0, 0].exp()
    counts = torch.bincount(draws[:, 0].long(), minlength=3).double() / len(draws)
    assert (counts - expected).abs().max() < 4 * (0.25 / len(draws)) ** 0.5
    assert abs(float(draws[:, 1].mean() - dist.mean[0, 0])) < 4 * float(dist.std[0, 0]) / len(draws) ** 0.5
    assert abs(float(draws[:, 1].std() / dist.std[0, 0]) - 1.0) < 0.1

    again, _ = _worker(spec, normalize_input=True)  # the stream is seeded from torch's seed in on_start
    again.requests.append(PolicyRequest(0, 0, [1], [2]))
    again.flush()
    worker.on_start()
    worker.requests.append(PolicyRequest(0, 0, [1], [2]))
    worker.flush()
    torch.testing.assert_close(buffers.tensors["actions"][1, 2], again.buffers.tensors["actions"][1, 2])


def test_new_weights_reach_the_kernel_with_the_policy_version():
    worker, buffers = _worker(ActionSpec((4,), 0), normalize_input=True)
    worker.requests.append(PolicyRequest(0, 0, [0], [0]))
    worker.flush()
    before = buffers.tensors["action_logits"][0, 0].clone()
    with torch.no_grad():
        for p in worker.model.parameters():
            p.mul_(1.5)
        worker.model.obs_normalizer._stats_by_key["obs"].mean.add_(1.0)
    worker.store.publish(worker.model, 1)
    worker.requests.append(PolicyRequest(0, 0, [0], [0]))
    worker.flush()
    after = buffers.tensors["action_logits"][0, 0]
    with torch.no_grad():
        out = worker.model.policy_step(worker.model.normalize_obs({"obs": buffers.obs["obs"][:1, 0]}), None)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, out.action_logits[0], rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize(
    "overrides, obs_spec",
    [
        (dict(use_rnn=True), OBS_SPEC),
        (dict(actor_critic_share_weights=False), OBS_SPEC),
        ({}, {"a": ((3,), np.dtype(np.float32)), "b": ((2,), np.dtype(np.float32))}),
        ({}, {"obs": ((6,), np.dtype(np.uint8))}),
        (dict(encoder_mlp_layers=[]), OBS_SPEC),
    ],
)
def test_other_models_stay_in_torch(overrides, obs_spec):
    model = create_actor_critic(obs_spec, ActionSpec((2,), 0), _cfg(**overrides))
    assert MlpPolicyKernel.of(model) is None
