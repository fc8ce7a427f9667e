"""Running mean and variance of a stream of batches, kept as module buffers so they travel with checkpoints
and with the weights the learner publishes to inference workers.
"""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Per-element statistics over every leading (batch) dimension of the inputs.

    `update` merges one batch with the parallel-variance formula (Chan et al.), so the cost is one
    `var_mean` over the batch regardless of how many samples came before. `count` is float64 so it stays
    exact long after float32 would stop counting (2**24 samples).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-5, clip: float | None = 5.0):
        super().__init__()
        self.shape = tuple(shape)
        self.epsilon = epsilon
        self.clip = clip
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float32))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float32))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        batch_dims = tuple(range(x.dim() - len(self.shape)))
        batch_count = x.numel() // max(1, self.mean.numel())
        if batch_count == 0:
            return
        batch_var, batch_mean = torch.var_mean(x.float(), dim=batch_dims, correction=0)
        self.merge(batch_mean, batch_var, batch_count)

    @torch.no_grad()
    def merge(self, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_count: int) -> None:
        """Fold in the moments of `batch_count` samples computed elsewhere (e.g. by a uint8 kernel)."""
        total = self.count + batch_count
        weight = (batch_count / total).float()
        delta = batch_mean - self.mean
        self.mean.add_(delta * weight)
        self.var.mul_(1.0 - weight).add_(batch_var * weight + delta.square() * (weight * (1.0 - weight)))
        self.count.copy_(total)

    def _std_and_inverse(self) -> tuple[torch.Tensor, torch.Tensor]:
        """sqrt(var + eps) and its inverse, recomputed only when the statistics changed: every in-place write to
        `var` (an update, a load of new weights) bumps its version, and a move to another device gives a new tensor.
        An inference step on a small batch runs a handful of operators, so two fewer per call count."""
        key = (self.var.data_ptr(), self.var._version)
        cached = self.__dict__.get("_std_cache")
        if cached is None or cached[0] != key:
            std = torch.sqrt(self.var + self.epsilon)
            cached = self.__dict__["_std_cache"] = (key, std, std.reciprocal())
        return cached[1], cached[2]

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std, clipped to [-clip, clip] when a clip is set; returns a new tensor."""
        y = (x - self.mean).mul_(self._std_and_inverse()[1])
        return y.clamp_(-self.clip, self.clip) if self.clip is not None else y

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.mean, x, self._std_and_inverse()[0])

    def summary(self, prefix: str) -> dict[str, float]:
        """`<prefix>_running_mean` and `<prefix>_running_std`: the mean over elements of the mean and of
        sqrt(var + eps), Sample Factory's TensorBoard names for its normalizers."""
        std, _ = self._std_and_inverse()
        return {f"{prefix}_running_mean": float(self.mean.mean()), f"{prefix}_running_std": float(std.mean())}
