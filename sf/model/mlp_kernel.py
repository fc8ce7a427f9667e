"""A small MLP policy's inference step as one numba kernel over the trajectory buffers.

Why it exists: for the networks of classic control and MuJoCo (a 64-64 MLP, a few thousand weights) a torch forward
pass is some forty operators whose cost is their dispatch, not their arithmetic: 250-400 us for 16 observations on
a 2-core EPYC where one operator costs 4-12 us. This kernel does the same step (observation normalization, the
hidden layers, both heads, the action distribution's sample and log-probability, the value in return space) for a
whole request in one call, reading the observations from the buffers and writing actions, log-probabilities,
distribution parameters, values and the policy version straight back (`docs/performance.md`, section 15).

It serves `ActorCritic` models whose encoder is one MLP over one float vector observation, with no recurrent core
and shared actor and critic weights, all built by sf's own factory functions: `MlpPolicyKernel.of(model)` returns None
for any other model (one with a part a user registered among them), whose inference stays in torch. Everything the
step reads (weights transposed so that the inner loop runs over contiguous outputs, biases, observation and return
statistics, the learned log stddev) is packed into one float32 array, copied from the model whenever the policy
version changes: the learner's updates reach the kernel when they reach the torch model, and a call unboxes a dozen
arguments instead of thirty.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from torch import nn

from sf.model.activations import Activation, fast_elu, fast_tanh
from sf.model.actor_critic import LOG_STD_MAX, LOG_STD_MIN, ActorCriticSharedWeights
from sf.model.cores import IdentityCore
from sf.model.encoders import MlpEncoder

ACTIVATION_CODES = {"elu": 0, "relu": 1, "tanh": 2}
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

# meta: the int64 description of the packed float32 array; header fields, then 4 per dense layer
# (inputs, outputs, offset of the transposed weights, offset of the bias): the hidden layers, the action head, the
# value head; then the categorical sizes
_LAYERS, _ACT, _OBS_DIM, _OBS_MEAN, _OBS_INV_STD, _OBS_CLIP, _RET_MEAN, _RET_STD = range(8)
_NUM_DISCRETE, _CONTINUOUS, _LOG_STD, _TANH_SCALE = range(8, 12)
_HEADER = 12
_KERNEL = dict(cache=True, fastmath={"contract", "reassoc", "nsz", "arcp"}, error_model="numpy")


@numba.njit(cache=True)
def seed_sampling(seed: int) -> None:
    """Seed the kernel's own random stream (numba keeps one per thread, apart from numpy's and torch's)."""
    np.random.seed(seed)


@numba.njit(**_KERNEL)
def _dense(x: np.ndarray, blob: np.ndarray, meta: np.ndarray, at: int, act: int) -> np.ndarray:
    """x [B, I] @ W^T + b, then the activation (-1: none). The transposed weights make the inner loop run over
    contiguous outputs, which vectorizes without reordering any sum."""
    inputs, outputs, w_at, b_at = meta[at], meta[at + 1], meta[at + 2], meta[at + 3]
    w = blob[w_at:b_at].reshape((inputs, outputs))
    b = blob[b_at : b_at + outputs]
    out = np.empty((x.shape[0], outputs), dtype=np.float32)
    for r in range(x.shape[0]):
        row = out[r]
        row[:] = b
        for k in range(inputs):
            xk = x[r, k]
            for j in range(outputs):
                row[j] += xk * w[k, j]
    if act == 0:
        for r in range(out.shape[0]):
            for j in range(outputs):
                out[r, j] = fast_elu(out[r, j])
    elif act == 1:
        for r in range(out.shape[0]):
            for j in range(outputs):
                out[r, j] = max(out[r, j], np.float32(0.0))
    elif act == 2:
        for r in range(out.shape[0]):
            for j in range(outputs):
                out[r, j] = fast_tanh(out[r, j])
    return out


@numba.njit(cache=True, error_model="numpy")
def _policy_step(
    obs, slots, steps, rollout, blob, meta, version, out_actions, out_log_prob, out_params, out_values, out_version
):
    n, dim = slots.size, meta[_OBS_DIM]
    mean, inv_std, clip = meta[_OBS_MEAN], meta[_OBS_INV_STD], blob[meta[_OBS_CLIP]]
    x = np.empty((n, dim), dtype=np.float32)
    for r in range(n):
        src = obs[slots[r] * (rollout + 1) + steps[r]]
        for d in range(dim):
            v = (src[d] - blob[mean + d]) * blob[inv_std + d]
            x[r, d] = min(max(v, -clip), clip)
    at = _HEADER
    for _ in range(meta[_LAYERS]):
        x = _dense(x, blob, meta, at, meta[_ACT])
        at += 4
    head = _dense(x, blob, meta, at, -1)
    value = _dense(x, blob, meta, at + 4, -1)
    sizes = meta[at + 8 : at + 8 + meta[_NUM_DISCRETE]]
    continuous, tanh_scale = meta[_CONTINUOUS], blob[meta[_TANH_SCALE]]
    num_discrete_logits = 0
    for size in sizes:
        num_discrete_logits += size
    for r in range(n):
        dst = slots[r] * rollout + steps[r]
        params = out_params[dst]
        params[: head.shape[1]] = head[r]
        if meta[_LOG_STD] >= 0:  # a learned stddev: the head gives the means only, squashed if tanh_scale > 0
            for c in range(continuous):
                if tanh_scale > 0:
                    m = params[num_discrete_logits + c]
                    params[num_discrete_logits + c] = tanh_scale * np.tanh(m / tanh_scale)
                params[num_discrete_logits + continuous + c] = blob[meta[_LOG_STD] + c]
        log_prob = 0.0
        start = 0
        for j in range(sizes.size):  # inverse-CDF draw from the softmax of each categorical's logits
            size = sizes[j]
            top = params[start]
            for k in range(1, size):
                top = max(top, params[start + k])
            total = 0.0
            for k in range(size):
                total += np.exp(params[start + k] - top)
            u = np.random.random() * total
            choice, acc = size - 1, 0.0
            for k in range(size):
                acc += np.exp(params[start + k] - top)
                if u < acc:
                    choice = k
                    break
            out_actions[dst, j] = choice
            log_prob += params[start + choice] - top - np.log(total)
            start += size
        for c in range(continuous):
            mu = params[num_discrete_logits + c]
            log_std = min(max(params[num_discrete_logits + continuous + c], LOG_STD_MIN), LOG_STD_MAX)
            z = np.random.standard_normal()
            out_actions[dst, sizes.size + c] = mu + np.exp(log_std) * z
            log_prob -= 0.5 * z * z + log_std + _HALF_LOG_2PI
        out_log_prob[dst] = log_prob
        out_values[slots[r] * (rollout + 1) + steps[r]] = blob[meta[_RET_MEAN]] + value[r, 0] * blob[meta[_RET_STD]]
        out_version[dst] = version


def _activation_code(module: nn.Module) -> int | None:
    if isinstance(module, Activation):
        return ACTIVATION_CODES[module.kind]
    return ACTIVATION_CODES["relu"] if isinstance(module, nn.ReLU) else None


class MlpPolicyKernel:
    """The numba inference step of one `ActorCritic` MLP policy; `of(model)` says whether the model qualifies."""

    @staticmethod
    def of(model: nn.Module) -> MlpPolicyKernel | None:
        """The kernel for `model`, or None when it is not sf's single-branch MLP policy over one float vector."""
        if type(model) is not ActorCriticSharedWeights or model.custom_parts or len(model.encoders) != 1:
            return None
        encoders = model.encoders[0].encoders
        if (
            len(encoders) != 1
            or not isinstance(encoders[0], MlpEncoder)
            or not isinstance(model.cores[0], IdentityCore)
        ):
            return None
        (key,) = model.encoders[0].keys
        if key in model.obs_normalizer.uint8_keys or any(p.device.type != "cpu" for p in model.parameters()):
            return None
        layers = [*encoders[0].mlp, *model.decoders[0]]
        linears = [m for m in layers if isinstance(m, nn.Linear)]
        acts = {_activation_code(m) for m in layers if not isinstance(m, nn.Linear)}
        if not linears or len(acts) != 1 or None in acts:
            return None
        return MlpPolicyKernel(model, key, linears, acts.pop())

    def __init__(self, model: ActorCriticSharedWeights, key: str, linears: list[nn.Linear], act_code: int):
        self.model = model
        self.stats = model.obs_normalizer._stats_by_key.get(key)
        self.dense = [*linears, model.action_head, model.value_head]
        spec = model.action_spec
        obs_dim = linears[0].in_features
        # the packed array: every dense layer's transposed weights and bias, then the statistics and scalars
        sizes, offset, layer_meta = [], 0, []
        for lin in self.dense:
            layer_meta += [lin.in_features, lin.out_features, offset, offset + lin.weight.numel()]
            offset += lin.weight.numel() + lin.out_features
        self._obs_at, offset = offset, offset + 2 * obs_dim + 1  # mean, inverse std, clip
        self._scalars_at, offset = offset, offset + 3  # returns mean and std, tanh scale
        self._log_std_at = offset if model.log_std is not None else -1
        offset += model.log_std.numel() if model.log_std is not None else 0
        self.blob = np.zeros(offset, dtype=np.float32)
        header = [0] * _HEADER
        header[_LAYERS], header[_ACT], header[_OBS_DIM] = len(linears), act_code, obs_dim
        header[_OBS_MEAN], header[_OBS_INV_STD] = self._obs_at, self._obs_at + obs_dim
        header[_OBS_CLIP] = self._obs_at + 2 * obs_dim
        header[_RET_MEAN], header[_RET_STD], header[_TANH_SCALE] = range(self._scalars_at, self._scalars_at + 3)
        header[_NUM_DISCRETE], header[_CONTINUOUS] = len(spec.discrete_sizes), spec.continuous_dim
        header[_LOG_STD] = self._log_std_at
        sizes = list(spec.discrete_sizes)
        self.meta = np.asarray(header + layer_meta + sizes, dtype=np.int64)
        self.version: int | None = None

    @torch.no_grad()
    def refresh(self, version: int) -> None:
        """Copy weights and statistics into the packed array when the policy version changed since the last copy."""
        if version == self.version:
            return
        blob, meta, model = self.blob, self.meta, self.model
        for i, lin in enumerate(self.dense):
            inputs, outputs, w_at, b_at = meta[_HEADER + 4 * i : _HEADER + 4 * i + 4]
            blob[w_at:b_at].reshape(inputs, outputs)[:] = lin.weight.numpy().T
            blob[b_at : b_at + outputs] = lin.bias.numpy()
        dim, at = meta[_OBS_DIM], self._obs_at
        if self.stats is not None:  # the torch path's arithmetic: (x - mean) * (1 / sqrt(var + eps)), clipped
            blob[at : at + dim] = self.stats.mean.numpy().reshape(-1)
            blob[at + dim : at + 2 * dim] = torch.rsqrt(self.stats.var + self.stats.epsilon).numpy().reshape(-1)
            blob[at + 2 * dim] = np.inf if self.stats.clip is None else self.stats.clip
        else:
            blob[at : at + dim], blob[at + dim : at + 2 * dim], blob[at + 2 * dim] = 0.0, 1.0, np.inf
        returns = model.returns_normalizer
        if returns is not None:
            blob[self._scalars_at] = float(returns.mean)
            blob[self._scalars_at + 1] = float(torch.sqrt(returns.var + returns.epsilon))
        else:
            blob[self._scalars_at : self._scalars_at + 2] = 0.0, 1.0
        blob[self._scalars_at + 2] = model.tanh_scale
        if model.log_std is not None:
            blob[self._log_std_at : self._log_std_at + model.log_std.numel()] = model.log_std.numpy()
        self.version = version

    def compile(self, obs: np.ndarray, rollout: int, out: dict) -> None:
        """Compile the step for these buffers (or load it from numba's cache) now, by a call with no rows: left to
        the first request, it would stall a running process for seconds."""
        none = np.empty(0, dtype=np.int64)
        _policy_step(
            obs,
            none,
            none,
            rollout,
            self.blob,
            self.meta,
            -1,
            out["actions"],
            out["log_prob"],
            out["action_logits"],
            out["values"],
            out["policy_version"],
        )

    def step(self, obs: np.ndarray, slots: np.ndarray, steps: np.ndarray, rollout: int, version: int, out: dict):
        """One inference step for the observations of (slot, step) pairs in `obs` [slots * (rollout + 1),
        features]. The results go to the same pairs of the flat numpy views out["actions"], out["log_prob"],
        out["action_logits"], out["policy_version"] ([slots * rollout, ...]) and out["values"] (like `obs`)."""
        self.refresh(version)
        _policy_step(
            obs,
            slots,
            steps,
            rollout,
            self.blob,
            self.meta,
            version,
            out["actions"],
            out["log_prob"],
            out["action_logits"],
            out["values"],
            out["policy_version"],
        )
