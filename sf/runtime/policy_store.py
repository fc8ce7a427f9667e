"""How the learner's newest weights reach the inference workers.

Serial placement shares the model object itself, so there is nothing to copy. Parallel placement keeps
one copy of the state dict in shared memory guarded by a lock, plus a version counter the inference
workers poll before each forward pass (a single integer read while nothing changed).
"""
from __future__ import annotations

import torch
from torch import nn


class LocalPolicyStore:
    """Learner and inference worker hold the same module: publishing only bumps the version."""

    def __init__(self):
        self.version = 0

    def publish(self, model: nn.Module, version: int) -> None:
        self.version = version

    def maybe_load(self, model: nn.Module, current: int) -> int:
        return self.version


class SharedPolicyStore:
    def __init__(self, model: nn.Module, lock):
        self.params = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in model.state_dict().items()}
        self.version_t = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.lock = lock

    @property
    def version(self) -> int:
        return int(self.version_t[0])

    def publish(self, model: nn.Module, version: int) -> None:
        with torch.no_grad(), self.lock:
            for key, value in model.state_dict().items():
                self.params[key].copy_(value)
            self.version_t[0] = version

    def maybe_load(self, model: nn.Module, current: int) -> int:
        """Load the published weights if they are newer than `current`; return the version now held."""
        if int(self.version_t[0]) == current:
            return current
        with self.lock:
            model.load_state_dict(self.params)
            return int(self.version_t[0])
